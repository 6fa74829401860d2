"""llama.cpp's llama-server as a measured backend: finding and building the binary, running it, GGUF export."""
