"""Factories for scalescope capture --factory: nanoGPT's model.py exactly as its author publishes
it (../shared/fixtures/pytorch-models/nanogpt_model.py, MIT licence beside it), imported
unmodified. Its GPT takes a GPTConfig, not keyword arguments, hence a factory."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "fixtures",
                                         "pytorch-models"))
if not os.path.isfile(os.path.join(FIXTURES, "nanogpt_model.py")):
    raise ImportError(f"nanoGPT's model.py not found in {FIXTURES} (../shared is absent)")
sys.path.insert(0, FIXTURES)
import nanogpt_model  # noqa: E402


def gpt2_medium():
    """GPT-2 medium: 24 layers, 16 heads, 1,024 wide, vocabulary 50,257, context 1,024 (GPT-2's
    own sizes: Radford et al. 2019, Table 2; nanoGPT's from_pretrained uses the same), no
    dropout."""
    return nanogpt_model.GPT(nanogpt_model.GPTConfig(n_layer=24, n_head=16, n_embd=1024,
                                                     vocab_size=50257, block_size=1024,
                                                     dropout=0.0, bias=True))


def gpt2_tiny():
    """The same code at test sizes: 2 layers, 4 heads, 128 wide, vocabulary 1,000, context 256."""
    return nanogpt_model.GPT(nanogpt_model.GPTConfig(n_layer=2, n_head=4, n_embd=128,
                                                     vocab_size=1000, block_size=256,
                                                     dropout=0.0, bias=True))
