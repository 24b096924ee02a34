// placeholder until the tokenizer lands
