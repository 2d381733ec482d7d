"""SGLang's side: intents and their spelling per release, launch flags, the HTTP API's names,
managed per-release environments, and model sizes from config.json."""
