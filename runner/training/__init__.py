"""Lightning's side of a run, knowing nothing of compilation: ``TrainModule`` and ``PreferenceModule``, their
losses, the learning-rate schedules, the progress bar and the model summary a run prints."""
