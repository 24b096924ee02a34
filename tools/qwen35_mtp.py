"""Reference MTP head for Qwen3.5 in PyTorch, built from transformers' own Qwen3.5 classes.

transformers does not implement MTP (it ignores `mtp.*`), so this module is the reference that
tandem's MTP drafter is checked against, and the head that tools/train trains. It computes the
teacher-forced first MTP pass exactly as the drafter does (../shared/reference, section 2):
for every position t < T-1 the pair (h_t, x_{t+1}) at position t, with h_t taken after the
target's final norm; input = fc([norm_e(embed(x_{t+1})) ; norm_h(h_t)]); one full-attention
decoder layer (causal over the MTP's own positions); mtp.norm; the target's lm_head.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.models.qwen3_5 import modeling_qwen3_5 as q35


def text_config_of(config):
    return getattr(config, "text_config", config)


class Qwen35MTP(nn.Module):
    """Parameter names match the checkpoint's `mtp.*` tensors (prefix added by `mtp_state_dict`)."""

    def __init__(self, config):
        super().__init__()
        cfg = text_config_of(config)
        hidden = cfg.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = q35.Qwen3_5RMSNorm(hidden, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = q35.Qwen3_5RMSNorm(hidden, eps=cfg.rms_norm_eps)
        full_idx = cfg.layer_types.index("full_attention")  # build a full-attention layer
        self.layers = nn.ModuleList([q35.Qwen3_5DecoderLayer(cfg, full_idx)])
        self.norm = q35.Qwen3_5RMSNorm(hidden, eps=cfg.rms_norm_eps)

    def forward(self, hidden_after_norm, next_ids, embed_tokens, rotary_emb, positions):
        """hidden_after_norm [B,T,H] = h_t, next_ids [B,T] = x_{t+1}, positions [B,T] = t.
        Returns the post-mtp.norm hidden [B,T,H] (feed lm_head for logits)."""
        emb = embed_tokens(next_ids)
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(hidden_after_norm)], dim=-1))
        b, t, _ = x.shape
        pos3 = positions[None].expand(3, b, t)
        position_embeddings = rotary_emb(x, pos3)
        # Explicit additive causal mask so the result does not depend on the attention backend.
        mask = torch.full((t, t), float("-inf"), dtype=x.dtype, device=x.device).triu(1)
        mask = mask[None, None].expand(b, 1, t, t)
        x = self.layers[0](x, position_embeddings=position_embeddings, attention_mask=mask,
                           position_ids=positions)
        return self.norm(x)


def mtp_state_dict(mtp: Qwen35MTP) -> dict[str, torch.Tensor]:
    return {f"mtp.{k}": v for k, v in mtp.state_dict().items()}


def language_model_of(model):
    """The text model (embed_tokens, layers, norm, rotary_emb) of either HF layout."""
    inner = model.model
    return getattr(inner, "language_model", inner)


@torch.no_grad()
def teacher_forced_mtp_logits(model, mtp: Qwen35MTP, ids: torch.Tensor) -> torch.Tensor:
    """ids [1,T] -> MTP logits [T-1, V]: row t predicts token t+2 from (h_t, x_{t+1})."""
    lm = language_model_of(model)
    out = lm(input_ids=ids)
    h = out.last_hidden_state  # after the final norm
    positions = torch.arange(ids.shape[1] - 1, device=ids.device)[None]
    hm = mtp(h[:, :-1], ids[:, 1:], lm.embed_tokens, lm.rotary_emb, positions)
    return model.lm_head(hm)[0]
