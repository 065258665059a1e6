"""Text generation with TransformerLens' `generate` signature (a mixin of CircuitTransformer).

Every step runs the full forward pass on the tokens so far: there is no key/value cache, so every hook
(cached, patching, steering) fires on each step and sees the whole sequence, exactly as in a plain forward
call. A sequence longer than the context keeps its last n_ctx tokens as the window the model reads.

Sampling is TransformerLens' own `sample_logits` (temperature, top-k or top-p, frequency penalty), so the
semantics match: temperature 0 or do_sample=False is greedy; top_k and top_p exclude each other.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

RETURN_TYPES = ("input", "str", "tokens")


class GenerationMixin:
    """Mixin for CircuitTransformer (reads `self.config`, `self.tokenizer`, `self.to_tokens`, `self.W_E`)."""

    @torch.no_grad()
    def generate(
        self,
        input: str | list[str] | Int[Tensor, "batch pos"] = "",
        max_new_tokens: int = 10,
        stop_at_eos: bool = True,
        eos_token_id: int | None = None,
        do_sample: bool = True,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float = 1.0,
        freq_penalty: float = 0.0,
        use_past_kv_cache: bool = True,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        return_type: str | None = "input",
        verbose: bool = True,
    ) -> str | list[str] | Int[Tensor, "batch pos_plus_new_tokens"]:
        """Continue text or token ids by `max_new_tokens` tokens.

        input: a string, a list of strings, or token ids [batch, pos] (or [pos]). Strings are tokenized with
        `prepend_bos` (default False; BOS is "<|endoftext|>", the document separator). The empty string
        starts a new document: it becomes the single token "<|endoftext|>".
        stop_at_eos: a sequence that emits `eos_token_id` (default the tokenizer's "<|endoftext|>") is done;
        its later positions are filled with that token, and generation ends when every sequence is done.
        do_sample=False (or temperature 0) picks the argmax; otherwise tokens are sampled from
        softmax(logits / temperature), restricted to the top_k tokens or the top_p probability mass, with
        `freq_penalty` subtracted per earlier occurrence. Seed with torch.manual_seed for repeatable samples.
        use_past_kv_cache: accepted for TransformerLens compatibility and ignored: every step recomputes the
        whole sequence (so hooks see it all).
        return_type: "input" (the input's kind: str -> str, list -> list of str, ids -> ids), "str" or
        "tokens". Texts are the decoded prompt plus continuation (without a prepended BOS).
        verbose: a progress bar over the new tokens.

        Prompts of different lengths are generated one by one (no padding enters the context) and, as ids,
        are left-padded with "<|endoftext|>" to one tensor.
        """
        if return_type not in RETURN_TYPES:
            raise ValueError(f"return_type must be one of {RETURN_TYPES}, got {return_type!r}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k}")
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
        if top_k is not None and top_p is not None:
            raise ValueError("top_k and top_p exclude each other (TransformerLens semantics): give one")
        if not (math.isfinite(freq_penalty) and freq_penalty >= 0):
            raise ValueError(f"freq_penalty must be a finite number >= 0, got {freq_penalty}")

        input_kind = "str" if isinstance(input, str) else "list" if isinstance(input, list) else "tokens"
        if input_kind == "tokens":
            rows = _as_token_rows(input).tolist()
            bos_rows = [False] * len(rows)
        else:
            texts = [input] if input_kind == "str" else input
            if not texts or not all(isinstance(text, str) for text in texts):
                raise ValueError("generate takes a string, a non-empty list of strings, or token ids [batch, pos]")
            tokenizer = self._require_tokenizer()
            prepend = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
            bos_rows = [bool(prepend) or text == "" for text in texts]
            rows = [([tokenizer.eos_id] if bos else []) + tokenizer.encode(text) for text, bos in zip(texts, bos_rows)]
        if eos_token_id is None and stop_at_eos:
            if self.tokenizer is None:
                raise ValueError("stop_at_eos needs an eos_token_id: this model has no tokenizer to take it from")
            eos_token_id = self.tokenizer.eos_id
        greedy = not do_sample or temperature == 0

        generated: list[Tensor] = [None] * len(rows)  # type: ignore[list-item]
        for indices in _rows_by_length(rows):
            batch = torch.tensor([rows[i] for i in indices], dtype=torch.long, device=self.W_E.device)
            out = self._generate_batch(batch, max_new_tokens, stop_at_eos, eos_token_id, greedy, top_k, top_p,
                                       temperature, freq_penalty, verbose)
            for index, row in zip(indices, out):
                generated[index] = row

        wants_text = return_type == "str" or (return_type == "input" and input_kind != "tokens")
        if not wants_text:
            return _left_pad(generated, self._pad_id(eos_token_id))
        texts = [
            self._decode_generated(row, len(prompt), bos, stop_at_eos, eos_token_id)
            for row, prompt, bos in zip(generated, rows, bos_rows)
        ]
        return texts[0] if input_kind == "str" else texts

    def _generate_batch(
        self, tokens: Tensor, max_new_tokens: int, stop_at_eos: bool, eos_token_id: int | None, greedy: bool,
        top_k: int | None, top_p: float | None, temperature: float, freq_penalty: float, verbose: bool,
    ) -> Tensor:
        from tqdm.auto import tqdm
        from transformer_lens.utilities import sample_logits

        finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        for _ in tqdm(range(max_new_tokens), desc="generating", unit="token", disable=not verbose):
            window = tokens[:, -self.config.n_ctx :]
            final_logits = self(window)[:, -1, :]
            if greedy:
                next_tokens = final_logits.argmax(dim=-1)
            else:
                next_tokens = sample_logits(final_logits, top_k=top_k, top_p=top_p, temperature=temperature,
                                            freq_penalty=freq_penalty, tokens=tokens)
            if stop_at_eos:
                next_tokens = next_tokens.masked_fill(finished, eos_token_id)
                finished |= next_tokens == eos_token_id
            tokens = torch.cat([tokens, next_tokens[:, None].to(tokens.dtype)], dim=1)
            if stop_at_eos and bool(finished.all()):
                break
        return tokens

    def _pad_id(self, eos_token_id: int | None) -> int:
        if eos_token_id is not None:
            return eos_token_id
        return self.tokenizer.eos_id if self.tokenizer is not None else 0

    def _decode_generated(
        self, row: Tensor, prompt_length: int, bos: bool, stop_at_eos: bool, eos_token_id: int | None
    ) -> str:
        ids = row.tolist()
        if stop_at_eos and eos_token_id in ids[prompt_length:]:
            ids = ids[: ids.index(eos_token_id, prompt_length) + 1]  # keep the stop token, drop the fill after it
        return self._require_tokenizer().decode(ids[1:] if bos else ids)


def _as_token_rows(tokens: Any) -> Tensor:
    tokens = torch.as_tensor(tokens)
    if tokens.dim() == 1:
        tokens = tokens[None]
    if tokens.dim() != 2 or tokens.shape[1] == 0 or tokens.is_floating_point():
        raise ValueError(f"token ids must be an integer tensor [batch, pos] with pos >= 1, got {tuple(tokens.shape)}")
    return tokens.long()


def _rows_by_length(rows: list[list[int]]) -> list[list[int]]:
    """Indices of the rows, grouped by length: each group is one batch, so no padding enters a context."""
    groups: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(len(row), []).append(index)
    return list(groups.values())


def _left_pad(rows: list[Tensor], pad_id: int) -> Tensor:
    width = max(row.shape[0] for row in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long, device=rows[0].device)
    for index, row in enumerate(rows):
        out[index, width - row.shape[0] :] = row
    return out
