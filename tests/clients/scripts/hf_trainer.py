"""transformers' Trainer on a tiny GPT-2 built from a config in code (nothing downloaded).

`--leak`: compute_loss keeps every step's logits (and with them the autograd graph).
"""

import sys
from typing import Any

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging

logging.set_verbosity_error()  # type: ignore[no-untyped-call]
LEAK = "--leak" in sys.argv
torch.manual_seed(0)


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        self.data = torch.randint(0, vocab, (n, length))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.data[i]
        return {"input_ids": ids, "labels": ids}


class KeepingTrainer(Trainer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept: list[torch.Tensor] = []

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        outputs = model(**inputs)
        self.kept.append(outputs.logits)  # the planted leak
        return (outputs.loss, outputs) if return_outputs else outputs.loss


config = GPT2Config(vocab_size=2000, n_positions=64, n_embd=64, n_layer=2, n_head=2)
model = GPT2LMHeadModel(config)
args = TrainingArguments(
    output_dir=sys.argv[1],
    per_device_train_batch_size=8,
    max_steps=40,
    learning_rate=1e-3,
    report_to="none",
    save_strategy="no",
    logging_strategy="no",
    disable_tqdm=True,
    use_cpu=True,
    dataloader_num_workers=0,
    seed=0,
)
trainer_class = KeepingTrainer if LEAK else Trainer
trainer = trainer_class(model=model, args=args, train_dataset=Tokens(320, 64, 2000))
trainer.remove_callback(PrinterCallback)  # it prints timings, which differ run to run
result = trainer.train()
print("steps", result.global_step)
