"""A training loop whose DataLoader workers are started with the spawn context."""

import torch
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randn(2048, 1))
    loader = torch.utils.data.DataLoader(
        data, batch_size=64, num_workers=2, multiprocessing_context="spawn"
    )
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
    print("loss", round(float(loss), 3))


if __name__ == "__main__":
    main()
