"""The ledger's commands: ``groundlens keygen``, ``groundlens verify`` and ``evaluate --ledger``.

Kept apart from cli.py, which only registers them. Keys are read from files named on the command
line; the key material itself is never an argument and never printed.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from groundlens_core.errors import GroundlensInputError, printable
from groundlens_core.ledger import (
    ENV_SIGNING_KEY,
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    Ledger,
    LedgerVerdict,
    verify_ledger,
    write_keypair,
)


def cmd_keygen(args: argparse.Namespace) -> int:
    private, public, kid = write_keypair(args.out)
    print(printable(f"wrote {private} (private, owner-only: keep it secret) and {public} (public: share it)"))
    print(f"key id {kid}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    if not os.path.lexists(args.ledger):
        raise GroundlensInputError(f"ledger not found: {args.ledger}")
    verdict = verify_ledger(args.ledger, args.public_key, head=args.head)
    if verdict.ok and verdict.records == 0 and not args.allow_empty:
        # an emptied ledger verifies as 0 records: never "intact" unless an empty one is expected
        verdict = LedgerVerdict(False, 0, None, "empty", detail="no records (add --allow-empty if none are expected)")
    if args.json:
        print(json.dumps(verdict.to_dict(), sort_keys=True))
    else:
        print(printable(verdict.message() if verdict.ok else f"{args.ledger}: {verdict.message()}"))
        if verdict.ok and verdict.head:
            print(f"head {verdict.head}")
    return 0 if verdict.ok else 1


def add_ledger_commands(sub: Any) -> None:
    """Register ``keygen`` and ``verify`` on the ``groundlens`` parser's subcommands."""
    s = sub.add_parser("keygen", help="make an Ed25519 key pair for signed decision ledgers")
    s.add_argument(
        "--out",
        required=True,
        help=f"folder for {PRIVATE_KEY_NAME} (owner-only) and {PUBLIC_KEY_NAME} (never overwritten)",
    )
    s.set_defaults(func=cmd_keygen)

    s = sub.add_parser("verify", help="check a decision ledger's signatures and chain")
    s.add_argument("ledger", help="the ledger (JSONL) to check")
    s.add_argument("--public-key", required=True, help=f"the public key file ({PUBLIC_KEY_NAME})")
    s.add_argument(
        "--head",
        default=None,
        help="a chain head (SHA-256) printed by an earlier verify and kept elsewhere: must still be in the chain",
    )
    s.add_argument(
        "--allow-empty",
        action="store_true",
        help="an empty ledger (no records) verifies; without this it fails: records may have been removed",
    )
    s.add_argument("--json", action="store_true", help="print the verdict as JSON")
    s.set_defaults(func=cmd_verify)


def add_ledger_options(s: argparse.ArgumentParser) -> None:
    """``evaluate --ledger L --signing-key K [--ledger-text]``."""
    s.add_argument("--ledger", default=None, help="append one signed decision record per row to this JSONL ledger")
    s.add_argument(
        "--signing-key",
        default=None,
        help=f"the private key FILE that signs the ledger (default: {ENV_SIGNING_KEY}); never the key itself",
    )
    s.add_argument(
        "--ledger-text",
        action="store_true",
        help="also store the question, context and response texts in the ledger (default: SHA-256 hashes only)",
    )


def evaluate_ledger(args: argparse.Namespace) -> Ledger | None:
    """The ledger of an ``evaluate`` run, its key read now (before any scoring), or None."""
    if not args.ledger:
        if args.signing_key or args.ledger_text:
            raise GroundlensInputError("--signing-key and --ledger-text go with --ledger")
        return None
    return Ledger(args.ledger, args.signing_key, include_text=args.ledger_text)
