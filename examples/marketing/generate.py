"""Generate the marketing example's conversions table (deterministic: numpy seed 3).

One row per conversion: the channel that brought it, the customer's region and the
ISO week. Synthetic: no real person is in it. Run from anywhere:

    python examples/marketing/generate.py   # writes examples/marketing/conversions.csv
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHANNELS = ["search", "social", "email", "display", "affiliate", "tv"]
REGIONS = ["north", "south", "east", "west", "central"]
WEEKS = 26
ROWS = 20_000


def main() -> None:
    rng = np.random.default_rng(3)
    ch = rng.choice(len(CHANNELS), ROWS, p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05])
    rg = rng.choice(len(REGIONS), ROWS, p=[0.25, 0.2, 0.2, 0.2, 0.15])
    # a seasonal trend, stronger for social
    base = 1 + 0.5 * np.sin(np.arange(WEEKS) / WEEKS * 2 * np.pi)
    wk = np.array(
        [
            rng.choice(
                WEEKS, p=(base ** (2 if c == 1 else 1)) / (base ** (2 if c == 1 else 1)).sum()
            )
            for c in ch
        ]
    )
    device = rng.choice(["mobile", "desktop"], ROWS, p=[0.6, 0.4])
    out = Path(__file__).with_name("conversions.csv")
    with out.open("w") as f:
        f.write("channel,region,week,device\n")
        for c, r, w, d in zip(ch, rg, wk, device, strict=True):
            f.write(f"{CHANNELS[c]},{REGIONS[r]},{w + 1},{d}\n")


if __name__ == "__main__":
    main()
