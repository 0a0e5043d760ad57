"""Where models come from: one module per source (torchvision, timm, custom)."""
