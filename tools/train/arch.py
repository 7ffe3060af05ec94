"""Shared pieces of the small DeepSeek-V4 pipeline: model configurations, the DSpark drafter and the MTP-1 module
(both built from transformers' DeepseekV4 decoder layers), target feature capture, and the official-format
quantization (the FP8 / FP4 / E8M0 routines and name mapping are imported from tools/fixtures/gen_fixtures.py, which
also installs the stable-topk patch: Tensor.topk = stable sort, ties -> lower index)."""
import copy, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mv4

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
import gen_fixtures as gf  # noqa: E402  (installs the stable-topk patch)

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"


def target_config(vocab_size):
    """The shipped model: 5 layers (sliding, CSA, HCA, CSA, HCA), 2 hash-MoE layers then score-routed MoE."""
    return dict(
        vocab_size=vocab_size, hidden_size=256, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=1,
        head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=128, qk_rope_head_dim=16, partial_rotary_factor=0.25,
        sliding_window=64, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=128,
        index_n_heads=4, index_head_dim=64, index_topk=8, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        rms_norm_eps=1e-6, scoring_func="sqrtsoftplus", routed_scaling_factor=1.5, norm_topk_prob=True,
        swiglu_limit=10.0, rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=4096,
        num_nextn_predict_layers=0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=1,
        initializer_range=0.02, attn_implementation="eager",
        layer_types=[SLIDING, CSA, HCA, CSA, HCA],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
        compress_rates={CSA: 4, HCA: 16},
        rope_parameters={"main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                         "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 4.0,
                                      "original_max_position_embeddings": 1024, "beta_fast": 32.0, "beta_slow": 1.0,
                                      "attention_factor": 1.0, "partial_rotary_factor": 0.25}})


DSPARK = dict(layers=2, block=5, markov_rank=64)


def drafter_config(tcfg, n_layers):
    """Drafter layers: the target's layer format, sliding-window attention (target window), score-routed MoE."""
    c = copy.deepcopy(tcfg)
    c.update(num_hidden_layers=n_layers, layer_types=[SLIDING] * n_layers, mlp_layer_types=["moe"] * n_layers)
    return c


def make_target(cfg_kwargs, seed):
    torch.manual_seed(seed)
    cfg = transformers.DeepseekV4Config(**cfg_kwargs)
    model = transformers.DeepseekV4ForCausalLM(cfg).float()
    g = torch.Generator().manual_seed(seed + 1)
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):  # hash routing: a fixed random token -> k distinct experts table
                b.copy_(torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(b.shape[0])]))
    return model


def count_params(module):
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------ target features
class FeatureTap:
    """Forward hooks on target decoder layers: keeps each hooked layer's output residual streams [B, S, hc, D]."""

    def __init__(self, model, layer_ids):
        self.out = {}
        self.handles = [model.model.layers[i].register_forward_hook(self._hook(i)) for i in layer_ids]

    def _hook(self, i):
        def f(mod, inp, out):
            self.out[i] = out[0] if isinstance(out, tuple) else out
        return f

    def remove(self):
        for h in self.handles:
            h.remove()


def dspark_features(tap, layer_ids):
    """DSpark context features: per chosen target layer the mean of its hc output streams, concatenated -> [B,S,m*D]."""
    return torch.cat([tap.out[i].float().mean(dim=2) for i in layer_ids], dim=-1)


# ------------------------------------------------------------------ V4 layer with custom masks
def attn_forward(attn, x, cos, sin, mask, kv_prefix=None):
    """transformers' DeepseekV4Attention for a sliding layer (no cache) with an explicit additive mask and
    optional extra K=V entries placed before the sequence's own (DSpark context)."""
    B, S, _ = x.shape
    hd = attn.head_dim
    q = attn.q_b_proj(attn.q_a_norm(attn.q_a_proj(x))).view(B, S, -1, hd).transpose(1, 2)
    q = mv4.apply_rotary_pos_emb(attn.q_b_norm(q), cos, sin)
    kv = attn.kv_norm(attn.kv_proj(x)).view(B, S, 1, hd).transpose(1, 2)
    kv = mv4.apply_rotary_pos_emb(kv, cos, sin)
    if kv_prefix is not None:
        kv = torch.cat([kv_prefix.to(kv.dtype), kv], dim=2)
    out, _ = mv4.eager_attention_forward(attn, q, kv, kv, mask.to(q.dtype), scaling=attn.scaling)
    out = mv4.apply_rotary_pos_emb(out.transpose(1, 2), cos, -sin).transpose(1, 2)
    return attn.o_b_proj(attn.o_a_proj(out.reshape(B, S, attn.config.o_groups, -1)).flatten(2))


def context_kv(layer, h_ctx, cos, sin):
    """Per draft layer K=V of the projected target context: RoPE(kv_norm(wkv(attn_norm(H_ctx)))) -> [B,1,S,hd]."""
    attn = layer.self_attn
    B, S, _ = h_ctx.shape
    kv = attn.kv_norm(attn.kv_proj(layer.input_layernorm(h_ctx))).view(B, S, 1, attn.head_dim).transpose(1, 2)
    return mv4.apply_rotary_pos_emb(kv, cos, sin)


def layer_forward(layer, X, cos, sin, mask, kv_prefix=None):
    """DeepseekV4DecoderLayer.forward (mHC around attention and MoE) with attn_forward as the attention."""
    dtype = X.dtype
    post, comb, collapsed = layer.attn_hc(X)
    a = attn_forward(layer.self_attn, layer.input_layernorm(collapsed), cos, sin, mask, kv_prefix)
    X = post.to(dtype).unsqueeze(-1) * a.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), X)
    post, comb, collapsed = layer.ffn_hc(X)
    m = layer.mlp(layer.post_attention_layernorm(collapsed))
    return post.to(dtype).unsqueeze(-1) * m.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), X)


NEG = -1e30


def causal_sliding_mask(S, window, device):
    i = torch.arange(S, device=device)
    ok = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    return torch.where(ok, 0.0, NEG)[None, None]


def dspark_mask(anchors, S, block, window):
    """anchors [B, A] -> additive mask [B, 1, A*block, S + A*block]: a block slot sees context positions j with
    anchor - window <= j < anchor, and every slot of its own block (bidirectional)."""
    B, A = anchors.shape
    dev = anchors.device
    a = anchors.repeat_interleave(block, dim=1)  # [B, Q]
    j = torch.arange(S, device=dev)
    ctx_ok = (j[None, None, :] < a[:, :, None]) & (j[None, None, :] >= a[:, :, None] - window)
    grp = torch.arange(A, device=dev).repeat_interleave(block)
    blk_ok = (grp[:, None] == grp[None, :]).expand(B, -1, -1)
    ok = torch.cat([ctx_ok, blk_ok], dim=-1)
    return torch.where(ok, 0.0, NEG)[:, None]


class _Core(nn.Module):
    """Decoder layers + final hc collapse + norm taken from a freshly initialised DeepseekV4ForCausalLM, so every
    parameter has transformers' own initialisation and the export can reuse its checkpoint naming."""

    def __init__(self, cfg_kwargs, seed):
        super().__init__()
        torch.manual_seed(seed)
        m = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**cfg_kwargs)).float()
        self.layers = m.model.layers
        self.hc_head = m.model.hc_head
        self.norm = m.model.norm
        self.rotary = m.model.rotary_emb
        self.cfg_kwargs = cfg_kwargs


class DSpark(nn.Module):
    """DSpark drafter (paper §3.1): parallel backbone over an anchor-first block, Markov head, confidence head."""

    def __init__(self, tcfg, target_layer_ids, noise_id, n_layers=DSPARK["layers"], block=DSPARK["block"],
                 rank=DSPARK["markov_rank"], seed=123):
        super().__init__()
        D, V = tcfg["hidden_size"], tcfg["vocab_size"]
        self.cfg_kwargs = drafter_config(tcfg, n_layers)
        self.core = _Core(self.cfg_kwargs, seed)
        self.target_layer_ids, self.noise_id, self.block, self.rank = list(target_layer_ids), noise_id, block, rank
        self.window = tcfg["sliding_window"]
        self.main_proj = nn.Linear(len(target_layer_ids) * D, D, bias=False)
        self.main_norm = mv4.DeepseekV4RMSNorm(D, eps=tcfg["rms_norm_eps"])
        self.markov_embed = nn.Embedding(V, rank)
        self.markov_head = nn.Linear(rank, V, bias=False)
        self.confidence = nn.Linear(D + rank, 1)
        with torch.no_grad():
            nn.init.normal_(self.main_proj.weight, std=0.02)
            nn.init.normal_(self.markov_embed.weight, std=0.02)
            nn.init.zeros_(self.markov_head.weight)  # starts as the plain parallel (DFlash-like) drafter
            nn.init.zeros_(self.confidence.weight)
            nn.init.zeros_(self.confidence.bias)

    def backbone(self, embed, feats, ids, anchors):
        """feats [B,S,m*D] (target features of positions 0..S-1), ids [B,S'] with S' > max anchor, anchors [B,A].
        Returns the final normed hidden h [B, A, block, D] (slot k predicts the token at anchor + k + 1)."""
        B, S, _ = feats.shape
        A, g = anchors.shape[1], self.block
        h_ctx = self.main_norm(self.main_proj(feats))
        blk_ids = torch.full((B, A, g), self.noise_id, dtype=torch.long, device=ids.device)
        blk_ids[:, :, 0] = ids.gather(1, anchors)
        blk_pos = (anchors[:, :, None] + torch.arange(g, device=ids.device)).reshape(B, A * g)
        X = embed(blk_ids.reshape(B, A * g)).to(h_ctx.dtype)
        X = X.unsqueeze(2).expand(-1, -1, self.core.cfg_kwargs["hc_mult"], -1).contiguous()
        ctx_pos = torch.arange(S, device=ids.device)[None].expand(B, -1)
        cos_c, sin_c = self.core.rotary(h_ctx, ctx_pos, layer_type="main")
        cos_b, sin_b = self.core.rotary(X, blk_pos, layer_type="main")
        mask = dspark_mask(anchors, S, g, self.window)
        for layer in self.core.layers:
            X = layer_forward(layer, X, cos_b, sin_b, mask, context_kv(layer, h_ctx, cos_c, sin_c))
        h = self.core.norm(self.core.hc_head(X))
        return h.view(B, A, g, -1)

    def head(self, lm_head, h, prev):
        """h [..., D], prev [...] predecessor token ids -> (draft logits [..., V], confidence logit [...])."""
        e = self.markov_embed(prev)
        logits = lm_head(h).float() + self.markov_head(e).float()
        conf = self.confidence(torch.cat([h, e.to(h.dtype)], dim=-1)).squeeze(-1).float()
        return logits, conf


class MTP1(nn.Module):
    """DeepSeek-V4 MTP module (one block): X = h_proj(hnorm(X_main_i)) + e_proj(enorm(embed(t_{i+1}))), one
    sliding-window MoE block with mHC at position i, own hc_head and norm, shared head -> logits for t_{i+2}."""

    def __init__(self, tcfg, seed=321):
        super().__init__()
        D = tcfg["hidden_size"]
        self.cfg_kwargs = drafter_config(tcfg, 1)
        self.core = _Core(self.cfg_kwargs, seed)
        self.window = tcfg["sliding_window"]
        self.e_proj = nn.Linear(D, D, bias=False)
        self.h_proj = nn.Linear(D, D, bias=False)
        self.enorm = mv4.DeepseekV4RMSNorm(D, eps=tcfg["rms_norm_eps"])
        self.hnorm = mv4.DeepseekV4RMSNorm(D, eps=tcfg["rms_norm_eps"])
        with torch.no_grad():
            nn.init.normal_(self.e_proj.weight, std=0.02)
            nn.init.normal_(self.h_proj.weight, std=0.02)

    def forward(self, embed, lm_head, x_main, next_ids):
        """x_main [B,S,hc,D] = last target layer's output streams at positions 0..S-1, next_ids [B,S] = tokens at
        positions 1..S -> logits [B,S,V] for the tokens at positions 2..S+1."""
        B, S = next_ids.shape
        e = self.e_proj(self.enorm(embed(next_ids).to(x_main.dtype)))
        X = self.h_proj(self.hnorm(x_main)) + e.unsqueeze(2)
        pos = torch.arange(S, device=next_ids.device)[None].expand(B, -1)
        cos, sin = self.core.rotary(X, pos, layer_type="main")
        X = layer_forward(self.core.layers[0], X, cos, sin, causal_sliding_mask(S, self.window, X.device))
        return lm_head(self.core.norm(self.core.hc_head(X))).float()


# ------------------------------------------------------------------ official-format quantization
FP8_EXTRA = (".e_proj.weight", ".h_proj.weight", ".main_proj.weight")
F32_EXTRA = ("confidence_head.weight", "confidence_head.bias")


def quantize_official(name, t):
    """One tensor under its official name -> ({official name: stored tensor}, dequantized float tensor). Same
    rules as gen_fixtures.write_official_fixture (FP4 routed experts, FP8 attention / shared experts, BF16 norms,
    embeddings, head, gates, compressors; F32 mHC, sinks, ape, router bias; I64 tid2eid), plus: the MTP / DSpark
    projections e_proj, h_proj, main_proj in FP8 and the confidence head in F32."""
    if ".ffn.experts." in name and name.endswith(".weight"):
        packed, scale, deq = gf.quant_fp4(t.float())
        return {name: packed, name[:-len(".weight")] + ".scale": scale}, deq
    if name.endswith(gf.FP8_NAMES + FP8_EXTRA):
        q8, scale, deq = gf.quant_fp8_block(t.float())
        return {name: q8, name[:-len(".weight")] + ".scale": scale}, deq
    if t.dtype.is_floating_point and t.dim() >= 1 and "hc_" not in name and "attn_sink" not in name \
            and not name.endswith((".ape", ".bias")) and not name.endswith(F32_EXTRA):
        b = t.to(torch.bfloat16)
        return {name: b}, b.float()
    return {name: t.contiguous()}, t


def hf_to_official_state(hf_module_container, tmp_dir):
    """save_pretrained (transformers writes checkpoint names) -> {official name: tensor}, {official: saved name}."""
    from safetensors.torch import load_file
    hf_module_container.save_pretrained(tmp_dir, safe_serialization=True)
    saved = load_file(os.path.join(tmp_dir, "model.safetensors"))
    return {gf.official_name(k): v for k, v in saved.items()}, {gf.official_name(k): k for k in saved}


def roundtrip_core(core_module, cfg_kwargs, tmp_dir, prefix):
    """Quantizes a _Core's decoder layers / hc_head / norm as official tensors named `prefix` + layer-relative
    names (layers.{i}.X -> {prefix}{i}.X, hc_head_* / norm -> {prefix}{last}.hc_head_* / .norm), and loads the
    dequantized values back into the module (through transformers' own checkpoint conversion)."""
    from safetensors.torch import save_file
    m = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**cfg_kwargs)).float()
    m.model.layers.load_state_dict(core_module.layers.state_dict())
    m.model.hc_head.load_state_dict(core_module.hc_head.state_dict())
    m.model.norm.load_state_dict(core_module.norm.state_dict())
    off, saved_name = hf_to_official_state(m, tmp_dir)
    last = cfg_kwargs["num_hidden_layers"] - 1
    stored, deq_saved = {}, {}
    for on, t in off.items():
        if on in ("embed.weight", "head.weight"):
            deq_saved[saved_name[on]] = t
            continue
        if on.startswith("layers."):
            new = prefix + on[len("layers."):]
        else:  # hc_head_fn / hc_head_base / hc_head_scale / norm.weight belong to the last drafter layer
            new = f"{prefix}{last}.{on}"
        s, d = quantize_official(new, t)
        stored.update(s)
        deq_saved[saved_name[on]] = d.float() if d.dtype.is_floating_point else d
    save_file({k: v.contiguous() for k, v in deq_saved.items()}, os.path.join(tmp_dir, "model.safetensors"))
    m2 = transformers.DeepseekV4ForCausalLM.from_pretrained(tmp_dir, dtype=torch.float32)
    core_module.layers.load_state_dict(m2.model.layers.state_dict())
    core_module.hc_head.load_state_dict(m2.model.hc_head.state_dict())
    core_module.norm.load_state_dict(m2.model.norm.state_dict())
    return stored
