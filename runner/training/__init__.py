"""The LightningModule that trains any model, and learning-rate schedules. Knows nothing of compilation."""
