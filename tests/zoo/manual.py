"""Manual optimization as Lightning's manual-optimization page writes it.

``SimpleGAN``: the page's GAN, generator and discriminator plain ``nn.Sequential``s (as users pass
them), noise from a ``torch.distributions`` prior, ``self.manual_backward``, both optimizers stepped in
the step, ``self.log_dict`` of both losses. ``ManualAccumulateClip``: one optimizer, the loss scaled by
``1/N``, ``self.clip_gradients`` and ``opt.step()`` every ``N`` batches, a ``StepLR`` stepped every ``N``
batches through ``self.lr_schedulers()``. ``ManualLBFGS``: ``opt.step(closure=closure)`` with LBFGS and
its strong Wolfe line search.
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import Tensor, nn


class SimpleGAN(LightningModule):
    def __init__(self, latent_dim: int = 8, dim: int = 16) -> None:
        super().__init__()
        self.G = nn.Sequential(nn.Linear(latent_dim, 32), nn.ReLU(), nn.Linear(32, dim))
        self.D = nn.Sequential(nn.Linear(dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
        self.criterion = nn.BCEWithLogitsLoss()
        self._Z = torch.distributions.Normal(torch.zeros(latent_dim), torch.ones(latent_dim))

        # Important: This property activates manual optimization.
        self.automatic_optimization = False

    def sample_z(self, n: int) -> Tensor:
        sample = self._Z.sample((n,))
        return sample

    def sample_G(self, n: int) -> Tensor:
        z = self.sample_z(n)
        return self.G(z)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        # Implementation follows the PyTorch tutorial:
        # https://pytorch.org/tutorials/beginner/dcgan_faces_tutorial.html
        g_opt, d_opt = self.optimizers()

        X, _ = batch
        batch_size = X.shape[0]

        real_label = torch.ones((batch_size, 1), device=self.device)
        fake_label = torch.zeros((batch_size, 1), device=self.device)

        g_X = self.sample_G(batch_size)

        ##########################
        # Optimize Discriminator #
        ##########################
        d_x = self.D(X)
        errD_real = self.criterion(d_x, real_label)

        d_z = self.D(g_X.detach())
        errD_fake = self.criterion(d_z, fake_label)

        errD = errD_real + errD_fake

        d_opt.zero_grad()
        self.manual_backward(errD)
        d_opt.step()

        ######################
        # Optimize Generator #
        ######################
        d_z = self.D(g_X)
        errG = self.criterion(d_z, real_label)

        g_opt.zero_grad()
        self.manual_backward(errG)
        g_opt.step()

        self.log_dict({"g_loss": errG, "d_loss": errD}, prog_bar=True)

    def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        g_opt = torch.optim.Adam(self.G.parameters(), lr=1e-3)
        d_opt = torch.optim.Adam(self.D.parameters(), lr=1e-3)
        return g_opt, d_opt


class ManualAccumulateClip(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, n: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))
        self.automatic_optimization = False

    def compute_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        opt = self.optimizers()
        N = self.hparams.n

        # scale losses by 1/N (for N batches of gradient accumulation)
        loss = self.compute_loss(batch) / N
        self.manual_backward(loss)
        self.log("train_loss", loss)

        # accumulate gradients of N batches
        if (batch_idx + 1) % N == 0:
            # clip gradients
            self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
            opt.step()
            opt.zero_grad()

        sch = self.lr_schedulers()

        # step every N batches
        if (batch_idx + 1) % N == 0:
            sch.step()

    def configure_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[torch.optim.lr_scheduler.LRScheduler]]:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return [optimizer], [scheduler]


class ManualLBFGS(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, classes))
        self.automatic_optimization = False

    def compute_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # The strong Wolfe line search keeps LBFGS from diverging on minibatches (without it the loss grew
        # from 1.0 to 91 by the 11th batch, and any rounding difference grew with it).
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3, line_search_fn="strong_wolfe")

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        opt = self.optimizers()

        def closure() -> Tensor:
            loss = self.compute_loss(batch)
            opt.zero_grad()
            self.manual_backward(loss)
            return loss

        loss = opt.step(closure=closure)
        self.log("train_loss", loss)
