"""The composition: a training run built from parts chosen by its config, run, saved and resumed.

`TrainConfig` is the run's plain data; `Run` composes the parts (`nonstop.experiment.registry`
names them, `nonstop.experiment.run.Part` is what each offers); `train` runs one to the end and
returns what happened; `nonstop.experiment.record.train_in_directory` records one in a run
directory (what ``nonstop train`` does). No command-line code is imported from here.
"""

from nonstop.experiment.config import TrainConfig, default_env_kwargs
from nonstop.experiment.loop import ProgressRows, train
from nonstop.experiment.run import Run

#: the name a run had before it was composed from parts (kept for callers of the earlier API)
TrainingRun = Run

__all__ = ["TrainConfig", "Run", "TrainingRun", "train", "ProgressRows", "default_env_kwargs"]
