"""``dsmlkit render``: placeholder until its issue lands."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("render", help="(not available yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("dsmlkit render is not available in this build yet", file=sys.stderr)
    return 2
