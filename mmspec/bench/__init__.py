"""``mmspec bench``: side-by-side benchmarks, one module per modality on a shared harness.

- :mod:`.harness`: interleaved timed repetitions, Spec-Bench metrics, tables, JSON and plots;
- :mod:`.peers`: what every speed claim is measured against (HF ``generate`` plain / assisted / with CFG, diffusers'
  own loop) and the runner of mmspec's token speculators;
- :mod:`.quality`: the shapes-t2i quality set-up (conditions, real features) for the lossy image methods;
- :mod:`.vlm`, :mod:`.video`, :mod:`.image_ar`, :mod:`.diffusion`, :mod:`.verifiers`: the benches.

Nothing in the library imports this package; only the CLI does.
"""

__all__: list[str] = []
