"""Manual optimization with two optimizers alternating: a GAN step as Lightning's GAN tutorial writes it.

``automatic_optimization = False``, ``self.optimizers()``, ``self.toggle_optimizer``,
``self.manual_backward``, ``opt.step()``/``opt.zero_grad()`` inside the step, and both LR schedulers
stepped through ``self.lr_schedulers()`` on the last batch of each epoch.
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class Generator(nn.Module):
    def __init__(self, latent_dim: int = 8, dim: int = 16) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, dim), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class GAN(LightningModule):
    def __init__(self, latent_dim: int = 8, dim: int = 16, lr: float = 2e-3, b1: float = 0.5,
                 b2: float = 0.999) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim, dim)
        self.discriminator = Discriminator(dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def adversarial_loss(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(y_hat, y)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        real, _ = batch
        optimizer_g, optimizer_d = self.optimizers()

        # sample noise
        z = torch.randn(real.shape[0], self.hparams.latent_dim).type_as(real)

        # train generator
        self.toggle_optimizer(optimizer_g)
        self.generated = self(z)
        valid = torch.ones(real.size(0), 1).type_as(real)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # train discriminator
        self.toggle_optimizer(optimizer_d)
        real_loss = self.adversarial_loss(self.discriminator(real), valid)
        fake = torch.zeros(real.size(0), 1).type_as(real)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

        if self.trainer.is_last_batch:
            for scheduler in self.lr_schedulers():
                scheduler.step()

    def configure_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[torch.optim.lr_scheduler.LRScheduler]]:
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)
        sched_d = torch.optim.lr_scheduler.StepLR(opt_d, step_size=1, gamma=0.5)
        return [opt_g, opt_d], [sched_g, sched_d]
