"""Lightning's Trainer with DataLoader workers (its optimizer steps use a closure).

`--leak`: training_step keeps every step's output in a list.
"""

import sys
import warnings

import lightning as L
import torch
from torch import nn

warnings.filterwarnings("ignore")
LEAK = "--leak" in sys.argv


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
        self.kept: list[torch.Tensor] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        (x,) = batch
        out: torch.Tensor = self.net(x)
        loss = (out - x).pow(2).mean()
        if LEAK:
            self.kept.append(out)  # the planted leak: every step's output stays alive
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    L.seed_everything(0, verbose=False)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 512))
    loader = torch.utils.data.DataLoader(data, batch_size=128, num_workers=2)
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=sys.argv[1],
    )
    trainer.fit(Model(), loader)
    print("steps", trainer.global_step)
