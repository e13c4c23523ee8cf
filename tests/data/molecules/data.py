"""Writes the tiny molecule tables used by tests/test_molecules.py (seeded; run from anywhere).

Real SMILES of small common molecules with fake, seeded targets, in the real file layouts:
ESOL (`delaney-processed.csv`), FreeSolv (`SAMPL.csv`: CRLF line ends, trailing spaces),
a multi-task table with missing values, a BBBP-like classification table, and broken files.

`bbbp_order.csv` reproduces, in 60 molecules, why MoleculeNet's BBBP fails under the
deterministic scaffold split in its file order: four large scaffold sets (benzene, cyclohexane,
pyridine, acyclic) of both classes, then singleton scaffolds (phenyl-(CH2)k-cyclohexyl, one per
k), the 8 negatives first and the 12 positives last. The scaffold split fills train with the
large sets and the first singletons, leaving positives only to val and test.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

SMILES = """
CCO CC(=O)O c1ccccc1 Cc1ccccc1 Oc1ccccc1 Nc1ccccc1 CCN(CC)CC CC(C)O ClC(Cl)Cl CCCCCC C1CCCCC1
c1ccc2ccccc2c1 O=C(O)c1ccccc1 CC(=O)Nc1ccc(O)cc1 CN1C=NC2=C1C(=O)N(C(=O)N2C)C
CC(C)Cc1ccc(cc1)C(C)C(=O)O OCC1OC(O)C(O)C(O)C1O C#N CCOC(=O)C c1ccncc1 C1CCOC1 CS(=O)(=O)Cl
FC(F)(F)c1ccccc1 Brc1ccccc1 CCCCO CC(C)(C)O c1ccc(cc1)c2ccccc2 O=C1CCCCC1 CN(C)C=O C=CC=C CC#CC
N#Cc1ccccc1 COc1ccccc1 Clc1ccc(Cl)cc1 CC1=CC(=O)C=CC1=O O C [Na+].[Cl-] C[C@H](N)C(=O)O F/C=C/F
""".split()
INVALID = ["C1CC", "C(C)(C)(C)(C)C"]  # unclosed ring (parse error); five-valent carbon (sanitisation)


def write_esol(rng: np.random.Generator) -> None:
    header = [
        "Compound ID", "ESOL predicted log solubility in mols per litre", "Minimum Degree", "Molecular Weight",
        "Number of H-Bond Donors ", "Number of Rings", "Number of Rotatable Bonds", "Polar Surface Area",
        "measured log solubility in mols per litre", "smiles",
    ]  # fmt: skip
    rows = []
    for i, smiles in enumerate(SMILES):
        target = round(float(rng.normal(-2.5, 1.5)), 3)
        padded = smiles + " " if i % 7 == 0 else smiles  # MoleculeNet files have trailing spaces
        rows.append([f"mol{i}", round(target + rng.normal(0, 0.3), 3), 1, 100.0, 0, 1, 0, 20.0, target, padded])
    with open(HERE / "esol_tiny.csv", "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])
    with_invalid = rows[:10] + [[f"bad{j}", 0, 1, 1.0, 0, 0, 0, 0.0, -1.0, s] for j, s in enumerate(INVALID)]
    with open(HERE / "esol_invalid.csv", "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *with_invalid])


def write_freesolv(rng: np.random.Generator) -> None:
    lines = ["iupac,smiles,expt,calc"]
    for i, smiles in enumerate(SMILES[:20]):
        expt = f"{rng.normal(-4, 3):.2f}" + (" " if i % 3 == 0 else "")
        lines.append(f"compound {i},{smiles},{expt},{rng.normal(-4, 3):.3f}")
    (HERE / "SAMPL.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())


def write_multitask(rng: np.random.Generator) -> None:
    with open(HERE / "multitask.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["smiles", "task_a", "task_b"])
        for i, smiles in enumerate(SMILES):
            a = "" if i % 5 == 0 else f"{rng.normal():.3f}"
            b = " nan" if i % 4 == 1 else f" {rng.normal(3, 2):.3f} "
            writer.writerow([smiles, a, b])


def write_classification(rng: np.random.Generator) -> None:
    with open(HERE / "bbbp_tiny.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["num", "name", "p_np", "smiles"])
        for i, smiles in enumerate(SMILES):
            writer.writerow([i + 1, f"mol{i}", int(rng.random() < 0.5) if i > 1 else i, smiles])


SUBSTITUENTS = ["C", "CC", "O", "N", "Cl", "F", "CO", "C(=O)O", "OC", "CCC"]
ACYCLIC = ["CCO", "CCCO", "CCCCO", "CCN", "CCCN", "CC(C)O", "CCOCC", "CCCCC", "CC(=O)O", "CCC(=O)O"]


def bbbp_order_rows() -> list[tuple[str, int]]:
    """(SMILES, p_np) in the order of `bbbp_order.csv`: large scaffold sets, then one-class singletons."""
    big = [
        ([f"{x}c1ccccc1" for x in SUBSTITUENTS], 0),
        ([f"{x}C1CCCCC1" for x in SUBSTITUENTS], 1),
        ([f"{x}c1ccncc1" for x in SUBSTITUENTS], 0),
        (ACYCLIC, 1),
    ]
    rows = [(smiles, label) for group, label in big for smiles in group]
    singletons = [f"c1ccc(cc1){'C' * k}C1CCCCC1" for k in range(20)]  # 20 distinct scaffolds
    return rows + [(smiles, int(k >= 8)) for k, smiles in enumerate(singletons)]


def write_bbbp_order() -> None:
    with open(HERE / "bbbp_order.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["num", "name", "p_np", "smiles"])  # BBBP's header
        for i, (smiles, label) in enumerate(bbbp_order_rows()):
            writer.writerow([i + 1, f"mol{i}", label, smiles])


def write_broken() -> None:
    (HERE / "empty.csv").write_text("")
    (HERE / "bad_target.csv").write_text("smiles,y\nCCO,1.5\nc1ccccc1,oops\nCC,2.0\n")


def main() -> None:
    rng = np.random.default_rng(0)
    write_esol(rng)
    write_freesolv(rng)
    write_multitask(rng)
    write_classification(rng)
    write_bbbp_order()
    write_broken()


if __name__ == "__main__":
    main()
