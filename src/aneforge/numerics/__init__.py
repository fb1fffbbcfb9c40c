"""fp16-aware numerics: weight compression (and, with later issues, paired fp16, FFT,
linear algebra and special functions)."""
