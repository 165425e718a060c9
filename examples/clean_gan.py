"""Clean control: a GAN, two models and two optimizers stepping in turn.

The discriminator sees generated samples through .detach(), so some of its forwards feed a
backward that stops before the generator; each optimizer clears its own gradients. memsight
must report nothing of severity warning or worse.
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64))
discriminator = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
real_label, fake_label = torch.ones(64, 1), torch.zeros(64, 1)

for step in range(150):
    real = torch.randn(64, 64)
    fake = generator(torch.randn(64, 32))
    d_loss = bce(discriminator(real), real_label) + bce(discriminator(fake.detach()), fake_label)
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    g_loss = bce(discriminator(fake), real_label)
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    if step % 50 == 0:
        print(f"step {step} d {d_loss.item():.3f} g {g_loss.item():.3f}", flush=True)
