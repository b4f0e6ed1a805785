"""Pretrained models in the Hugging Face layout, loaded with `from_pretrained(folder)` from config.json and safetensors.

* `petagrad.models.llama`: `Llama`, the LLaMA architecture (Llama 2/3 and relatives): RoPE (with "llama3" scaling),
  RMSNorm, SwiGLU, grouped-query attention, a KV cache.
* `petagrad.models.gpt2`: `GPT2`, GPT-2 (`GPT2LMHeadModel`'s weights), with a KV cache.
* `petagrad.models.bert`: BERT encoders; `petagrad.models.wordpiece`: BERT's WordPiece tokenizer.
* `petagrad.models.tokenizer`: byte-level BPE (GPT-2's, and Hugging Face tokenizer.json files of that type).
* `petagrad.models.generate`: sampling (greedy, temperature, top-k, top-p) and `generate`, token by token through the
  KV cache.
* `petagrad.models.kv_cache`: the KV cache and every use of a decoder call's start position.
* `petagrad.models.hf`: reading Hugging Face folders (config.json, sharded safetensors, weight checks).

The submodules are imported on use (`from petagrad.models.gpt2 import GPT2`), so importing petagrad loads none of them.
See docs/models.md.
"""
