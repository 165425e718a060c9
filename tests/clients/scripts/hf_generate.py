"""generate() in a loop on a tiny GPT-2 built from a config in code: inference, no optimizer."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

logging.set_verbosity_error()  # type: ignore[no-untyped-call]
torch.manual_seed(0)
config = GPT2Config(vocab_size=500, n_positions=64, n_embd=64, n_layer=2, n_head=2)
model = GPT2LMHeadModel(config).eval()  # type: ignore[no-untyped-call]
total = 0
for _batch in range(30):
    prompt = torch.randint(0, 500, (4, 8))
    out = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    total += int(out.shape[1])
print("tokens", total)
