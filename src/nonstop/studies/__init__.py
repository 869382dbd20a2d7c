"""Studies: what is built on runs, never a part of one (docs/architecture.md).

A study runs runs, or reads what they wrote, to answer a question: the paper's figures
(`paper`, `paperlimits`) and learning experiments as cells of runs (`sweep`, `delays`,
`cellrun`, and `delaysim`, the authors' clockless delay simulation), schedulers side by side
(`compare`), how large a delay a world tolerates (`tolerance`), and a run's report (`report`).
Studies import the composition (`nonstop.experiment`); nothing there imports a study. Each
module is imported on its own (``from nonstop.studies.sweep import ...``): this package
imports none of them, so that ``import nonstop.studies`` stays light.
"""
