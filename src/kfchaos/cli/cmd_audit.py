"""`kfchaos audit verify RECORD|DIR`: recompute the hashes in a run's audit record, or check a whole run folder
(kfchaos.rundir.verification.verify: its seal and signature, its audit record against its files, and its verdict
re-judged). A record that lies in a run folder (runs/<id>/audit.json) is checked with its folder: the folder's files
are what the verdict rests on, and the record alone hashes only the experiment and baseline it was given.
`kfchaos audit key`: the key this machine signs with, to hand to whoever verifies (kfchaos.signing).

A signature counts only when a key trusted here verified it (`--public-key`, a pinned fingerprint, the user's config
folder); a folder or record with only hashes, or signed by another key, verifies as "integrity only: not
authenticated", and `--require-signed` makes that exit 1. A signature by a key other than those trusted here is
named as a stranger's (`"signature": "stranger"`), apart from none (`"unsigned"`). With KFCHAOS_SEAL_KEY set, an HMAC
missing or not matching is a mismatch (kfchaos.runseal.check_signature).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("audit", help="audit records of runs, and the key that signs them")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    verify = actions.add_parser(
        "verify",
        help="recompute every hash in RECORD, or check a run folder DIR: every file's hash, its signature, the audit "
        "record, the verdict re-judged (exit 0 ok, 1 mismatch or, with --require-signed, not authenticated, "
        "3 unreadable)",
    )
    verify.add_argument("record", type=Path, metavar="RECORD|DIR")
    verify.add_argument(
        "--root", default=".", type=Path, help="repository with pipelines/compiled/, to check the IR hash"
    )
    verify.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="FILE|sha256:FP",
        help="trust this signer: a PEM public key file, or a pinned fingerprint (`kfchaos audit key` prints both); "
        "repeatable. Besides these: the keys in $XDG_CONFIG_HOME/kfchaos/trusted-keys/ and your own",
    )
    verify.add_argument(
        "--require-signed",
        action="store_true",
        help="exit 1 unless a key trusted here signed the seal (a folder) or the record: a hash alone is "
        "integrity only, not authenticated (CI gates should use this)",
    )
    verify.add_argument("--json", action="store_true", help="one JSON document on stdout: ok and each finding")
    verify.set_defaults(func=run_verify)
    key = actions.add_parser(
        "key",
        help="print the public key and fingerprint this machine signs run folders with (made on first use), to give "
        "to whoever verifies (--public-key)",
    )
    key.set_defaults(func=run_key)


def run_verify(args: argparse.Namespace) -> int:
    from kfchaos import runseal, signing
    from kfchaos.audit import load_record, verify
    from kfchaos.rundir import layout, verification

    trusted = signing.trust(args.public_key)
    if args.record.is_dir():
        return _verify_folder(args, trusted)
    findings = verify(load_record(args.record), root=args.root.resolve(), trusted=trusted)
    signed = runseal.authenticated(findings, "record_signature")
    signer = runseal.signer(findings, "record_signature")
    folder = layout.holding(args.record)
    if folder is None:
        return _report(args, {"record": str(args.record)}, findings, trusted, (signed, signer), None)
    # The record of a run folder: the folder's files are checked with it, the one list `verdict --run` checks too
    # (an edited experiment copy or records file is named, whatever the record's own hashes say).
    findings += verification.verify(folder, trusted, record_checked=True)
    head = {"record": str(args.record), "folder": str(folder.path)}
    return _report(args, head, findings, trusted, (signed, signer), runseal.proves(findings))


def _verify_folder(args: argparse.Namespace, trusted: Any) -> int:
    from kfchaos import runseal
    from kfchaos.rundir import layout, verification

    findings = verification.verify(layout.open_to_verify(args.record), trusted)
    signed = (runseal.authenticated(findings), runseal.signer(findings))
    return _report(args, {"folder": str(args.record)}, findings, trusted, signed, runseal.proves(findings))


# The signature's status (kfchaos.signing.Verification) in the notes: a stranger's signature is said apart from none.
_UNSIGNED_NOTE = {
    "stranger": "signed by a stranger (a key other than those trusted here): integrity only: not authenticated",
    "untrusted": "signed by a key, and no key is trusted here: integrity only: not authenticated",
}


def _report(
    args: argparse.Namespace,
    head: dict[str, Any],
    findings: list[Any],
    trusted: Any,
    signed_by: tuple[bool, str],
    proves: list[str] | None,
) -> int:
    signed, signer = signed_by
    ok = all(f.ok for f in findings)
    refused = args.require_signed and not signed
    notes = list(trusted.problems)
    if not signed:
        note = _UNSIGNED_NOTE.get(signer, "integrity only: not authenticated")
        notes.append(note + ("" if not refused else " (--require-signed: refused)"))
    if args.json:
        from kfchaos.cli.jsonout import emit

        emit(
            {
                **head,
                "ok": ok and not refused,
                "authenticated": signed,
                "signature": signer or "none",  # authenticated, unsigned, stranger, untrusted, invalid
                "trusted_keys": trusted.describe(),
                "findings": [
                    {"what": f.what, "ok": f.ok, "detail": f.detail, "authenticated": f.authenticated} for f in findings
                ],
                **({"proves": proves} if proves is not None else {}),
                "notes": notes,
            }
        )
    else:
        for finding in findings:
            print(finding)
        for line in proves or []:
            print(line)
        for line in notes:
            print(line)
    return EXIT_PASS if ok and not refused else EXIT_FAIL


def run_key(args: argparse.Namespace) -> int:
    from kfchaos import signing

    signer = signing.signer(local=True)
    assert signer is not None  # local=True makes one when none is configured
    print(f"signing key: {signer.source}")
    print(f"fingerprint: {signing.fingerprint(signer.public)}")
    print(signing.public_pem(signer.public), end="")
    return EXIT_PASS
