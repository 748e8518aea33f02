"""Command line: ``python -m codegen [--schemas DIR] [--check] [--out DIR]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .targets import REPO_ROOT, default_schemas_dir, generate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    ap.add_argument("--schemas", type=Path, default=None,
                    help="Kafka schema directory (default: $KRAFT_KAFKA_SCHEMAS, else $KRAFT_SHARED/kafka-schemas, "
                         "else ../shared/kafka-schemas)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if a generated file differs")
    ap.add_argument("--out", type=Path, default=REPO_ROOT, metavar="DIR",
                    help="root to write (or --check against) instead of the repository, "
                         "e.g. a temp dir to diff a generator change against the committed files")
    args = ap.parse_args(argv)
    root = args.schemas or default_schemas_dir()
    if root is None or not root.is_dir():
        print("kafka schema directory not found; pass --schemas", file=sys.stderr)
        return 2
    files = generate(root)
    stale = []
    for rel, text in sorted(files.items()):
        path = args.out / rel
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            stale.append(rel)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    print(f"{len(files)} generated files, {len(stale)} {verb}" + "".join(f"\n  {s}" for s in stale))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
