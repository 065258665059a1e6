"""A top-k sparse autoencoder (Gao et al. 2024, *Scaling and evaluating sparse autoencoders*) on a model's FFN
writes: the learned-dictionary baseline set beside the parity bottleneck's computed one, with the same
dictionary size m and code size k (circuitlab.analysis.sae_compare measures the two side by side).

For a write x (hook_mlp_out of one layer), with m latents:

    pre   = W_enc (x - b_dec) + b_enc                      [m] pre-activations
    z     = ReLU(TopK_k(pre))                              the code: k latent ids and their values (>= 0)
    x_hat = b_dec + W_dec z                                W_dec's m columns (the dictionary) of unit norm

Training loss, for a batch of writes:

    reconstruction = sum_n ||x_n - x_hat_n||^2 / (N * v)   v = mean ||x - mean x||^2 of the first batch seen
    AuxK           = sum_n ||e_n - e_hat_n||^2 / sum_n ||e_n||^2,   e = x - x_hat (no gradient through e)
    e_hat          = W_dec ReLU(TopK_kaux(pre restricted to the dead latents))
    loss           = reconstruction + aux_coefficient * AuxK (alpha = 1/32, as Gao et al.)

AuxK hands the part of the write the k latents miss to the k_aux dead latents that would fire most, so a
latent that stopped firing gets a gradient again. A latent is dead when it has not fired (value > 0) on any of
the last `dead_after` training tokens; the count advances a batch at a time (`tokens_since_fired`). Both terms
are normalised, so the loss is scale free (the reconstruction term is Gao et al.'s normalised MSE, the AuxK
term normalised by the batch's residual energy). Decoder columns are kept at unit norm: the training loop
(circuitlab.training.sae_fit) takes the gradient's component along each column away before the step and
renormalises after it. Initialisation: W_dec random unit columns (seeded), W_enc = W_dec^T (Gao et al.'s tied
start), b_enc = 0, b_dec the mean write of the first batch (Gao et al. use the geometric median; the mean is
one line and what the normaliser v is measured around).

SAELens is not used: `pip install sae-lens` would replace transformer-lens 4.3, which circuitlab is written
against, by 3.9 (sae-lens pins transformer-lens<4.0) and pull 17 more packages; the autoencoder is the few
lines above, tested against a hand computation.

Letters: N tokens, D d_model, M latents, K code (k latents), A the AuxK code (k_aux latents).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from pydantic import BaseModel, ConfigDict, PositiveInt
from torch import Tensor, nn

from circuitlab.errors import UserError

CONFIG_FILE, WEIGHTS_FILE = "sae.json", "sae.safetensors"


class SAEConfig(BaseModel):
    """A top-k sparse autoencoder's shape and training-time settings (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d_model: PositiveInt
    n_latents: PositiveInt  # m
    k: PositiveInt
    k_aux: PositiveInt = 128  # Gao et al. use d_model / 2 (here 128 for d 256)
    aux_coefficient: float = 1 / 32
    dead_after: PositiveInt = 2**20  # tokens without firing that make a latent dead
    seed: int = 0

    def model_post_init(self, context: object) -> None:
        if self.k > self.n_latents:
            raise ValueError(f"k={self.k} must be at most n_latents={self.n_latents}")


class TopKSAE(nn.Module):
    """x_hat = b_dec + W_dec ReLU(TopK_k(W_enc (x - b_dec) + b_enc)), with the AuxK loss on dead latents."""

    def __init__(self, config: SAEConfig):
        super().__init__()
        self.config = config
        d, m = config.d_model, config.n_latents
        generator = torch.Generator().manual_seed(config.seed)
        decoder_DxM = torch.randn(d, m, generator=generator, dtype=torch.float64)
        decoder_DxM = (decoder_DxM / decoder_DxM.norm(dim=0, keepdim=True)).float()
        self.W_dec = nn.Parameter(decoder_DxM)
        self.W_enc = nn.Parameter(decoder_DxM.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(m))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.register_buffer("tokens_since_fired", torch.zeros(m, dtype=torch.long))
        # mean ||x - mean x||^2 of the data, the reconstruction term's normaliser (0 until set from data)
        self.register_buffer("variance", torch.zeros((), dtype=torch.float32))

    @property
    def n_latents(self) -> int:
        return self.config.n_latents

    @property
    def k(self) -> int:
        return self.config.k

    @torch.no_grad()
    def init_from_data_(self, x_NxD: Float[Tensor, "N D"]) -> None:
        """b_dec = the mean write, and the normaliser v = mean ||x - mean x||^2 (see the module docstring)."""
        x = x_NxD.float()
        mean_D = x.mean(0)
        self.b_dec.copy_(mean_D)
        self.variance.fill_((x - mean_D).pow(2).sum(-1).mean().clamp_min(torch.finfo(torch.float32).tiny))

    def pre_activations(self, x_NxD: Float[Tensor, "N D"]) -> Float[Tensor, "N M"]:
        return (x_NxD - self.b_dec) @ self.W_enc.T + self.b_enc

    def encode(self, x_NxD: Float[Tensor, "N D"]) -> tuple[Int[Tensor, "N K"], Float[Tensor, "N K"]]:
        """The code: the k latents of largest pre-activation and their values ReLU(pre) (a kept latent with a
        negative pre-activation has value 0 and has not fired)."""
        top = self.pre_activations(x_NxD).topk(self.k, dim=-1)
        return top.indices, torch.relu(top.values)

    def decode(self, indices_NxK: Int[Tensor, "N K"], values_NxK: Float[Tensor, "N K"]) -> Float[Tensor, "N D"]:
        """b_dec + sum_i z_i W_dec[:, i] over the code's latents."""
        return self.b_dec + self._decoded(indices_NxK, values_NxK)

    def _decoded(self, indices_NxK: Tensor, values_NxK: Tensor) -> Tensor:
        # sum_i z_i W_dec[:, i] without the [N, K, D] gather (embedding_bag sums the weighted columns per token)
        return F.embedding_bag(indices_NxK, self.W_dec.T, per_sample_weights=values_NxK.to(self.W_dec.dtype), mode="sum")

    def forward(self, x_NxD: Float[Tensor, "... D"]) -> Float[Tensor, "... D"]:
        """x_hat, for writes of any leading shape (e.g. [batch, pos, d_model] in a hook)."""
        flat = x_NxD.reshape(-1, x_NxD.shape[-1]).float()
        with torch.autocast(flat.device.type, enabled=False):  # spliced into a bf16 forward, it still codes in float32
            return self.decode(*self.encode(flat)).reshape(x_NxD.shape).to(x_NxD.dtype)

    def dead_latents(self) -> Tensor:
        """[M] bool: latents that have not fired on any of the last `dead_after` training tokens."""
        return self.tokens_since_fired >= self.config.dead_after

    @torch.no_grad()
    def record_firing_(self, indices_NxK: Tensor, values_NxK: Tensor) -> None:
        """Advance every latent's count of tokens since it fired by the batch's N tokens, and set it to 0 for the
        latents that fired (value > 0) on some token of the batch."""
        fired = torch.zeros(self.n_latents, dtype=torch.bool, device=indices_NxK.device)
        fired[indices_NxK[values_NxK > 0]] = True
        self.tokens_since_fired += indices_NxK.shape[0]
        self.tokens_since_fired[fired] = 0

    def loss(self, x_NxD: Float[Tensor, "N D"]) -> tuple[Tensor, dict[str, Tensor]]:
        """(training loss, its parts as 0-d tensors) for a batch of writes; records which latents fired (so a
        latent is judged dead after this batch, as Gao et al. update the count before choosing the AuxK
        latents). Needs `init_from_data_` first (the normaliser v)."""
        x = x_NxD.float()
        pre_NxM = self.pre_activations(x)
        top = pre_NxM.topk(self.k, dim=-1)
        values_NxK = torch.relu(top.values)
        x_hat_NxD = self.decode(top.indices, values_NxK)
        reconstruction = (x - x_hat_NxD).pow(2).sum() / (x.shape[0] * self.variance)
        self.record_firing_(top.indices, values_NxK)
        dead_M = self.dead_latents()
        aux = self.aux_loss(x - x_hat_NxD.detach(), pre_NxM, dead_M)
        total = reconstruction + self.config.aux_coefficient * aux
        parts = {"reconstruction": reconstruction.detach(), "aux": aux.detach(), "dead_share": dead_M.float().mean()}
        return total, parts

    def aux_loss(self, residual_NxD: Float[Tensor, "N D"], pre_NxM: Float[Tensor, "N M"], dead_M: Tensor) -> Tensor:
        """AuxK: the relative error of the dead latents' best k_aux reconstruction of the residual e (0 when no
        latent is dead). e_hat has no b_dec: it models a difference of writes."""
        masked_NxM = pre_NxM.masked_fill(~dead_M, float("-inf"))
        top = masked_NxM.topk(min(self.config.k_aux, self.n_latents), dim=-1)
        # fewer than k_aux dead latents: the live ones come in at -inf, and ReLU makes them 0
        e_hat_NxD = self._decoded(top.indices, torch.relu(top.values))
        error = (residual_NxD - e_hat_NxD).pow(2).sum() / residual_NxD.pow(2).sum().clamp_min(torch.finfo(torch.float32).tiny)
        return error * dead_M.any()  # no host sync: 0 when nothing is dead

    @torch.no_grad()
    def project_decoder_grad_(self) -> None:
        """Take away the gradient's component along each (unit) decoder column, so a step moves it along the
        sphere and the renormalisation after it changes little."""
        if self.W_dec.grad is not None:
            along_M = (self.W_dec.grad * self.W_dec).sum(0)
            self.W_dec.grad -= along_M * self.W_dec

    @torch.no_grad()
    def normalise_decoder_(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=0, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)

    # --- persistence ------------------------------------------------------------------------------------------

    def save(self, folder: str | os.PathLike, record: dict | None = None) -> Path:
        """Write sae.json (the config, and `record`: what it was trained on and how) and sae.safetensors."""
        from circuitlab.architectures.weights import save_tensors
        from circuitlab.atomic import atomic_write_text

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in self.state_dict().items()}
        save_tensors(tensors, folder / WEIGHTS_FILE)
        atomic_write_text(folder / CONFIG_FILE, json.dumps({"config": self.config.model_dump(), "record": record or {}},
                                                           indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[TopKSAE, dict]:
        """(the autoencoder saved in `folder`, its record); UserError when the folder holds none."""
        from circuitlab.architectures.weights import load_tensors

        folder = Path(folder)
        if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise UserError(f"{folder} holds no sparse autoencoder ({CONFIG_FILE} and {WEIGHTS_FILE}); train one with "
                            "`circuitlab report sae`")
        saved = json.loads((folder / CONFIG_FILE).read_text())
        sae = cls(SAEConfig(**saved["config"]))
        tensors, _ = load_tensors(folder / WEIGHTS_FILE)
        sae.load_state_dict(tensors)
        return sae.to(device), saved.get("record", {})
