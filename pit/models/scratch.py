"""The scratch family (paper Table 3 and Appendix A): a "tall and thin" decoder.

Block (parallel, one shared pre-norm):      x <- x + Attn(LN(x)) + MLP(LN(x))
Attention (gated GQA):  n_h = d / 64 query heads, n_kv = n_h / 4 key/value heads, RoPE on q and k,
                        output  W_o (sigmoid(g) * concat_heads),  g in R^d a learnable channel gate
MLP (SwiGLU):           W_down (silu(W_gate x) * W_up x)
Token interface:        any `TokenInterface` (PIT / TT / untied), logits = interface.logits(LN_f(x))

Choices the paper leaves open (docs/models.md): LayerNorm without bias (scale only), rotary
positions (interleaved pairs, theta = 10000) so no positional table, no biases in linear layers,
the gate applied before W_o with g = 0 at init (sigmoid = 0.5). This block is exactly Cohere's
(`CohereForCausalLM`) once the gate is folded into W_o, which `pit export` uses.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from pit.core.interfaces import InterfaceConfig, TokenInterface, make_interface
from pit.core.linalg import compute_dtype
from pit.models.base import InterfaceEmbedding, InterfaceHead, InterfaceLMMixin


class PitScratchConfig(PreTrainedConfig):
    model_type = "pit_scratch"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 32000
    hidden_size: int = 768
    num_hidden_layers: int = 16
    num_attention_heads: int = 12
    num_key_value_heads: int = 3
    intermediate_size: int = 2304
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    interface: dict | None = None  # InterfaceConfig as a dict
    init_seed: int = 0  # seed of the interface initialisation (Z of PIT, tables of TT/untied)
    use_cache: bool = True
    tie_word_embeddings: bool = False  # the interface does its own tying; HF must not tie anything
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """RoPE rotation on interleaved pairs (x0, x1), (x2, x3), ... -> (-x1, x0), (-x3, x2), ..."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos, sin of shape (B, 1, T, head_dim) for interleaved RoPE: angle_{p, 2i} = angle_{p, 2i+1} = p theta^(-2i/d_h),
    computed in FP32."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim)
    )
    angles = torch.repeat_interleave(position_ids[..., None].float() * inv_freq, 2, dim=-1)
    return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]


class RopeTable(nn.Module):
    """cos and sin of `rope_cos_sin` for positions 0 .. max_position_embeddings - 1, made once (as litgpt's rope
    cache) and kept as non-persistent FP32 buffers: checkpoints do not hold them; `_init_weights` remakes them after
    `from_pretrained`. A compiled step reads them instead of recomputing theta^(-2i/d_h), cos and sin for every
    element of q and k inside its fused kernels."""

    def __init__(self, cfg: PitScratchConfig):
        super().__init__()
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        shape = (cfg.max_position_embeddings, cfg.head_dim)
        self.register_buffer("cos", torch.empty(shape), persistent=False)
        self.register_buffer("sin", torch.empty(shape), persistent=False)
        self.reset_tables()

    @torch.no_grad()
    def reset_tables(self) -> None:
        positions = torch.arange(self.cos.shape[0], device=self.cos.device)[None]
        cos, sin = rope_cos_sin(positions, self.head_dim, self.theta, torch.float32)
        self.cos.copy_(cos[0, 0]), self.sin.copy_(sin[0, 0])

    def forward(self, past: int, T: int, position_ids: torch.Tensor | None, dtype: torch.dtype):
        """cos, sin for positions past .. past + T - 1 ((1, 1, T, d_h)) or for `position_ids` ((B, 1, T, d_h));
        positions the table may not hold (given by the caller, or past + T beyond it) are computed."""
        if position_ids is None and past + T <= self.cos.shape[0]:
            return self.cos[past : past + T].to(dtype)[None, None], self.sin[past : past + T].to(dtype)[None, None]
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=self.cos.device)[None]
        return rope_cos_sin(position_ids, self.head_dim, self.theta, dtype)


class GatedGQA(nn.Module):
    """Grouped-query attention with a channel-wise sigmoid gate on the concatenated head outputs."""

    def __init__(self, cfg: PitScratchConfig, layer_idx: int):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv, self.head_dim, self.layer_idx = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            hd,
            layer_idx,
        )
        self.q_proj = nn.Linear(d, self.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.o_proj = nn.Linear(self.n_heads * hd, d, bias=False)
        self.gate = nn.Parameter(torch.zeros(self.n_heads * hd))

    def forward(self, x, cos, sin, mask=None, cache: Cache | None = None):
        return self.o_proj(self.attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), cos, sin, mask, cache))

    def attend(self, q, k, v, cos, sin, mask=None, cache: Cache | None = None):
        """Projected q (B, T, n_h d_h), k and v (B, T, n_kv d_h) -> sigmoid(g) * concat_heads (B, T, n_h d_h): RoPE on
        q and k, the cache, causal SDPA (`mask`: padding or a cached prefix) with grouped key/value heads."""
        B, T, _ = q.shape
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_pairs(q) * sin
        k = k * cos + rotate_pairs(k) * sin
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None and T > 1, enable_gqa=self.n_kv != self.n_heads
        )
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return torch.sigmoid(self.gate).to(y.dtype) * y


class SwiGLU(nn.Module):
    def __init__(self, cfg: PitScratchConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ParallelBlock(nn.Module):
    """x + Attn(LN(x)) + MLP(LN(x)). Under autocast LN(x) is cast to the compute dtype once, here: autocast would
    cast the same FP32 tensor again for each of the five projections that read it (the same values, five passes).
    The residual stream x stays in the embedding's dtype (FP32)."""

    def __init__(self, cfg: PitScratchConfig, layer_idx: int):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)
        self.attn = GatedGQA(cfg, layer_idx)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, cos, sin, mask=None, cache=None):
        h = self.norm(x).to(compute_dtype(x))
        return x + self.attn(h, cos, sin, mask, cache) + self.mlp(h)


class PitForCausalLM(InterfaceLMMixin, PreTrainedModel, GenerationMixin):
    config_class = PitScratchConfig
    config: PitScratchConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["ParallelBlock"]
    _supports_sdpa = True

    def __init__(self, config: PitScratchConfig):
        super().__init__(config)
        self.interface = make_interface(
            InterfaceConfig.from_dict(config.interface), config.vocab_size, config.hidden_size
        )
        self.rope = RopeTable(config)
        self.layers = nn.ModuleList(ParallelBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        """N(0, 0.02) for linear layers, 0.02 / sqrt(2 L) for the two residual outputs (GPT-2 scheme),
        LayerNorm = 1, gate = 0, the interface from its own seeded initialiser, the RoPE table remade."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            scale = (
                1 / math.sqrt(2 * self.config.num_hidden_layers)
                if module.out_features == self.config.hidden_size
                else 1.0
            )
            nn.init.normal_(module.weight, std=std * scale)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, GatedGQA):
            nn.init.zeros_(module.gate)
        elif isinstance(module, TokenInterface):
            module.reset_parameters(self.config.init_seed)
        elif isinstance(module, RopeTable):
            module.reset_tables()

    def get_input_embeddings(self):
        return InterfaceEmbedding(self.interface)

    def get_output_embeddings(self):
        return InterfaceHead(self.interface)

    def hidden_states(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, output_hidden_states=False
    ):
        """Final normed hidden states (and, if asked, the residual stream after the embedding and each block)."""
        B, T = input_ids.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None and attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -T:]
        x = self.interface.embed(input_ids)
        # angles in FP32, cos and sin in the compute dtype: q and k stay bf16 under autocast (no FP32 copies)
        cos, sin = self.rope(past, T, position_ids, compute_dtype(x))
        mask = None  # None: plain causal attention (SDPA's fast path)
        if (attention_mask is not None and not bool(attention_mask.all())) or (past > 0 and T > 1):
            keys = torch.arange(past + T, device=x.device)
            queries = past + torch.arange(T, device=x.device)
            allowed = (keys[None, :] <= queries[:, None])[None]  # (1, T, past + T), causal
            if attention_mask is not None:
                # padding keys are hidden; a query always sees itself (padded rows stay finite)
                allowed = (allowed & attention_mask[:, None, :].bool()) | (keys[None, :] == queries[:, None])[None]
            mask = allowed[:, None]  # (B or 1, 1, T, past + T)
        states = [x] if output_hidden_states else None
        for block in self.layers:
            x = block(x, cos, sin, mask, past_key_values)
            if states is not None:
                states.append(x)
        return self.norm(x), states

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        labels=None,
        use_cache=None,
        output_hidden_states=None,
        logits_to_keep=0,
        **kwargs,
    ):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None and not self.training:
            past_key_values = DynamicCache()
        h, states = self.hidden_states(
            input_ids, attention_mask, position_ids, past_key_values, bool(output_hidden_states)
        )
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = self.interface.logits(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=past_key_values if use_cache else None,
            hidden_states=tuple(states) if states is not None else None,
        )
