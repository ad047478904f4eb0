"""Pipeline definitions. `kfchaos compile` builds one pipeline per experiment plus the generic one."""
