#!/usr/bin/env python3
"""The SASS instructions of one kernel that hold the most warp stall samples, from the CSV of
`ncu --import REPORT --page source --print-source sass --csv` (bench/ncu.sh NCU_SOURCE=1).

    python3 bench/ncu-stalls.py FILE.csv [TOP]

Prints the sampling columns found, the total samples, then the TOP (default 30) instructions by samples:
address, share of all samples, the not-issued share where ncu reports it, and the instruction."""
import csv
import sys


def number(text):
    try:
        return float(str(text).replace(',', '').strip() or 0)
    except ValueError:
        return 0.0


def leading_reasons(row, reasons):
    """The two stall reasons holding most of one instruction's samples, e.g. 'long_sb 80 barrier 12'."""
    counts = sorted(((number(row[c]), c[6:]) for c in reasons), reverse=True)[:2]
    return ' '.join(f'{name} {count:.0f}' for count, name in counts if count > 0)


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline='') as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own notes above the table are not CSV rows
    # ncu puts a '"Kernel Name","..."' line above the table's header: the header is the first row naming "Address"
    header = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), 0)
    rows = list(csv.DictReader(lines[header:]))
    if not rows:
        sys.exit(f'ncu-stalls: no CSV table in {path}')
    columns = list(rows[0].keys())
    sampling = [c for c in columns if 'Stall Sampling' in c]
    if not sampling:
        sys.exit(f'ncu-stalls: no stall-sampling column in {path}; columns: {", ".join(columns)}')
    every = next((c for c in sampling if 'All' in c), sampling[0])
    not_issued = next((c for c in sampling if 'Not' in c and c != every), None)
    source = next((c for c in columns if c.strip().lower() == 'source'), columns[1] if len(columns) > 1 else columns[0])
    address = next((c for c in columns if 'Address' in c), columns[0])
    total = sum(number(r[every]) for r in rows)
    reasons = [c for c in columns if c.startswith('stall_') and 'Not Issued' not in c]
    print(f'{path}: {len(rows)} instructions, {total:.0f} samples ({every})' + (f'; not issued: {not_issued}' if not_issued else ''))
    if total == 0:
        return
    ranked = sorted(rows, key=lambda r: -number(r[every]))[:top]
    covered = 0.0
    for r in ranked:
        share = number(r[every]) / total
        covered += share
        extra = f' {100 * number(r[not_issued]) / total:5.1f}%' if not_issued else ''
        print(f'{r[address][-5:]:>6} {100 * share:5.1f}%{extra}  {r[source].strip():<48} {leading_reasons(r, reasons)}')
    print(f'top {len(ranked)}: {100 * covered:.1f}% of the samples')
    if reasons:
        sums = sorted(((sum(number(r[c]) for r in rows), c) for c in reasons), reverse=True)
        print('by reason: ' + ', '.join(f'{c[6:]} {100 * v / total:.1f}%' for v, c in sums[:8] if v > 0))


if __name__ == '__main__':
    main()
