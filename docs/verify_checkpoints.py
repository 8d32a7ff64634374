#!/usr/bin/env python3
"""Verify a QTG audit checkpoint file with the Python standard library only (docs/audit.md).

    QTG_AUDIT_KEY=... [QTG_AUDIT_KEY_ID=k1 | QTG_AUDIT_KEY_FILE=keys.txt] \\
        python3 verify_checkpoints.py audit-checkpoints.jsonl [--show]

Checks every line: its HMAC-SHA-256 signature under the key it names, that its sequence
number follows the previous line's and that it carries the SHA-256 of the previous line (so
no checkpoint was removed, reordered or edited). Prints the newest checkpoint's counts per
table with --show. Exit status 0: every checkpoint verified; 1: a problem was printed.

Checkpoints received as ``audit.checkpoint`` webhooks carry the same object in ``data``: write
one per line, in sequence order, and verify them the same way.
"""

import hashlib
import hmac
import json
import os
import sys


def keyring() -> dict[str, bytes]:
    path = os.environ.get("QTG_AUDIT_KEY_FILE")
    if path:
        keys = {}
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                line = line.strip()
                if line and not line.startswith("#"):
                    key_id, _, secret = line.partition(" ")
                    keys[key_id] = secret.strip().encode()
        return keys
    secret = os.environ.get("QTG_AUDIT_KEY")
    if not secret:
        sys.exit("set QTG_AUDIT_KEY (and QTG_AUDIT_KEY_ID) or QTG_AUDIT_KEY_FILE")
    return {os.environ.get("QTG_AUDIT_KEY_ID", "k1"): secret.encode()}


def canonical(payload: dict) -> bytes:
    body = {k: v for k, v in payload.items() if k != "sig"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    keys = keyring()
    problems, seq, previous, latest, count = [], 0, "", None, 0
    with open(argv[0], encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                payload = json.loads(line)
            except ValueError:
                problems.append(f"line {number}: not JSON")
                continue
            secret = keys.get(str(payload.get("key_id")))
            if secret is None:
                problems.append(f"line {number}: signed with unknown key {payload.get('key_id')!r}")
                continue
            expected = hmac.new(secret, canonical(payload), hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, str(payload.get("sig", ""))):
                problems.append(f"line {number}: its signature fails")
                continue
            if payload.get("seq") != seq + 1 or payload.get("prev") != previous:
                problems.append(
                    f"line {number} (seq {payload.get('seq')}): does not follow the previous "
                    f"checkpoint (one was removed or reordered)"
                )
            seq = int(payload.get("seq") or 0)
            previous = hashlib.sha256(line.strip().encode()).hexdigest()
            latest, count = payload, count + 1
    for problem in problems:
        print(f"PROBLEM {problem}")
    if latest and "--show" in argv:
        for table, entry in sorted(latest["tables"].items()):
            print(f"{table}: {entry['rows']} rows up to id {entry['last_id']}")
    if problems:
        return 1
    print(
        f"{count} checkpoint(s) verified; newest seq {seq}"
        + (f" at {latest['at']}" if latest else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
