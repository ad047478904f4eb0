"""Running experiments against the demo stack: `kfchaos demo`'s scenarios (scenarios), `kfchaos demo up`/`down`
(up), `kfchaos run --local` for people (localrun) and its preflight (preflight), and `kfchaos tune --local` /
`kfchaos demo tune` (localtune)."""
