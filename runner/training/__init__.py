"""Lightning's side of a run, knowing nothing of compilation: ``TrainModule``, the LightningModule that trains any
model with cross-entropy (``module``); the learning-rate schedules and what a resume does to them (``schedules``);
the progress bar (``progress_bar``) and the model summary (``summary``) a run prints; and ``CallbackGroup``
(``callback_group``), runner's callbacks dispatched as one."""
