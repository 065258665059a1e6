"""The model zoo on one shared skeleton (transformer.py). Each design is one module, listed in registry.py:
FFNs under feedforward/, attention value modes under attention/, bottlenecks under bottleneck/. Every layer
declares its own circuits (code_layer.CodeLayer); design.py is the small base the design modules build on."""
