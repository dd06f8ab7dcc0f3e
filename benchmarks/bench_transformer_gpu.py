"""The transformer simulator benchmark on a CUDA device (exits cleanly when there is none).

    python benchmarks/bench_transformer_gpu.py --out DIR            # DIR/bench_transformer_cuda.{md,json}
    python benchmarks/bench_transformer_gpu.py --device cpu --quick --out DIR   # smoke test of the script

The same script as ``bench_transformer.py`` (the batched torch loop vs ``run_simulate``, law checks, rooflines),
with ``--device cuda`` as the default; see that file for the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transformer import main  # noqa: E402

if __name__ == "__main__":
    main(default_device="cuda")
