"""SGLang's side: intents and their spelling per release, launch flags, the HTTP API's names,
managed per-release environments and those that serve on this CPU (with what this CPU can run), and
model sizes from config.json."""
