"""Clean control: fine-tuning a head on a frozen backbone kept in eval mode.

The backbone runs with grad mode on but its parameters are frozen, so its outputs record no
graph: that is not inference-without-no-grad. Gradient clipping, an LR schedule and a quick
no_grad evaluation complete the loop. memsight must report nothing of severity warning or
worse.
"""
# memsight-expect: none

import torch
from torch import nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256)).eval()
for parameter in backbone.parameters():
    parameter.requires_grad_(False)
head = nn.Linear(256, 10)
optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)

for step in range(200):
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    loss = nn.functional.cross_entropy(head(backbone(x)), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    if step % 50 == 0:
        head.eval()
        with torch.no_grad():
            x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))
            accuracy = (head(backbone(x)).argmax(dim=1) == y).float().mean().item()
        head.train()
        print(f"step {step} loss {loss.item():.3f} accuracy {accuracy:.3f}", flush=True)
