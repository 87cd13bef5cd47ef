"""Models runner ships: a small GPT and an MLP. Any nn.Module or LightningModule also works."""
