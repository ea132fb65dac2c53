#!/usr/bin/env python3
"""Print the README's method table (markdown) from `veloxquant methods --json -`.

Usage: ./build/bin/veloxquant methods --json - | python3 scripts/methods_table.py
"""
import json
import sys


def main() -> None:
    data = json.load(sys.stdin)
    print("| id | family | what it does | options (default, range) |")
    print("|---|---|---|---|")
    for m in data["methods"]:
        opts = "; ".join(
            f"`{o['name']}`={o['default']} ({o['range']})" for o in m["options"]
        ) or "—"
        row = [f"`{m['id']}`", m['family'], m['description'], opts]
        print('| ' + ' | '.join(c.replace('|', '\\|') for c in row) + ' |')


if __name__ == "__main__":
    main()
