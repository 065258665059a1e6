"""Training: AdamW with warmup-stable-decay, divergence guard, resumable checkpoints, torchrun DDP/FSDP.

`circuitlab train` (circuitlab.cli.train) is the entry point; `Trainer` (circuitlab.training.trainer)
is the loop for callers who bring their own token windows.
"""
