"""kfchaos's own demo LLM server: an OpenAI-compatible endpoint that behaves like vLLM under load (api), its engine
model (engine: KV cache, scheduler, preemption; prefixcache, lora, tokenizer, disconnect, hostmemory) and the pod it
stands for (pod, kubeseries). Imports nothing else of the demo."""
