"""Write `results/claims.csv`: every claim of the paper this repository addresses, the paper's number beside ours and a
verdict, computed from the committed results (`binding_nb.claims`). Run it after a committed result changes, then
re-execute `nbs/index.ipynb` and copy its 'Results at a glance' into the README; a test compares all three.

    python scripts/write_claims.py [--out PATH]
"""
import argparse

from binding_nb.claims import CLAIMS_FILE, write_claims
from binding_nb.utils import out_csv, repo_path

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(repo_path(CLAIMS_FILE)), help="the CSV to write (default: %(default)s)")
    out = out_csv(parser, parser.parse_args().out)
    claims = write_claims(out)
    print(f"{len(claims)} claims written to {out}: " + ", ".join(f"{n} {v}" for v, n in claims.verdict.value_counts().items()))
