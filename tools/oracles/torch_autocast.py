"""torch.autocast(dtype=torch.bfloat16)'s CUDA rules, applied on the CPU.

Tofu's bf16 policy (graph/precision.cc) follows the op lists of CUDA's autocast. PyTorch
1.13's CPU autocast has other lists (softmax, layer norm and sums in bfloat16), so a PyTorch
peer on this machine applies CUDA's lists itself: within cuda_autocast_bf16(), the functions
of LOWER (products and convolutions) cast their float operands to bfloat16, those of FLOAT32
cast them to float32, and every other op runs on what it is given (PyTorch's type
promotion), as autocast leaves it. The functions are wrapped where models call them: in
torch, torch.nn.functional (whose own functions, e.g. multi_head_attention_forward, look
them up there) and as Tensor methods. Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) call fused
kernels that are not wrapped: they stay float32 here.

LOWER's functions compute as cuBLAS and cuDNN do under autocast: on the bfloat16 operands
widened to float32, accumulating in float32, the result (a linear's or convolution's bias
added) rounded to bfloat16 once. PyTorch 1.13's own CPU kernels do not always: its bfloat16
batched matmul of at most 512 multiply-adds per output block (a small attention's q @ k^T)
rounds as it accumulates, and gave the correctly rounded product in 37-41% of the elements
(measured on gpt_block's scores and on random 8x8x8 products; 100% from 8x16x8 up).
Run in grad mode: under no_grad PyTorch's eval fast paths for nn.MultiheadAttention and
nn.TransformerEncoderLayer call fused kernels that are not wrapped.

Arithmetic between a bfloat16 tensor and a Python number (SCALAR_OPS: multi_head_attention_
forward's q / sqrt(head_dim)) computes as CUDA's kernels do: in float32, the number a float32,
the result rounded to bfloat16 once. PyTorch 1.13's CPU kernels round the number to bfloat16
first (q / sqrt(8) divides by 2.828125): 2.1% of random quotients by sqrt(8) and 17% of sums
with 1/sqrt(8) differ from the correctly rounded ones.

The elementwise functions of OPMATH (GELU, SiLU) on a bfloat16 tensor compute as CUDA's
kernels do: in float32 on the widened input, the result rounded to bfloat16 once. PyTorch
1.13's CPU kernels do so only on a CPU with bfloat16 instructions (avx512_bf16, AMX), where
they call oneDNN; on others (AVX2 only: AMD Zen 3) its own kernel rounds after each
multiply and add of the formula, and 43% of random GELUs differed from the once-rounded
ones (measured with torch.backends.mkldnn disabled, which takes that path). PyTorch's
float32 GELU (oneDNN's) gives the same bits on both instruction sets (measured with
ONEDNN_MAX_CPU_ISA=AVX2), so the peer's outputs do not depend on the CPU.
"""

LOWER = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
         "conv_transpose3d", "prelu", "matmul", "bmm", "mm", "baddbmm", "addmm", "einsum",
         "__matmul__"]
FLOAT32 = ["softmax", "log_softmax", "layer_norm", "group_norm", "instance_norm", "exp", "log",
           "pow", "reciprocal", "softplus", "sum", "cumsum", "prod", "cross_entropy", "mse_loss",
           "nll_loss", "__pow__"]
OPMATH = ["gelu", "silu"]
SCALAR_OPS = ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "add", "sub", "mul", "div"]


class cuda_autocast_bf16:
    """A context within which LOWER's and FLOAT32's functions cast their floating-point
    tensor arguments (float64 aside) to bfloat16 and float32, and OPMATH's compute in
    float32. A module that holds one of OPMATH's functions itself (nn.TransformerEncoderLayer's
    `activation`, bound at construction to F.gelu) calls the original, which the context
    cannot reach: give the model, and such attributes of its modules are wrapped too."""

    def __init__(self, model=None):
        self.model = model

    def __enter__(self):
        import torch
        import torch.nn.functional as F
        self.saved = []

        def cast(fn, dtype):
            def to(a):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64:
                    return a.to(dtype)
                if isinstance(a, (list, tuple)):
                    return type(a)(to(x) for x in a)
                return a

            if dtype == torch.bfloat16:
                def wide(a):  # a bfloat16 operand, widened exactly for float32 arithmetic
                    a = to(a)
                    if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16:
                        return a.float()
                    if isinstance(a, (list, tuple)):
                        return type(a)(wide(x) for x in a)
                    return a

                def lowered(*args, **kwargs):
                    out = fn(*[wide(a) for a in args], **{k: wide(v) for k, v in kwargs.items()})
                    return out.to(torch.bfloat16) if isinstance(out, torch.Tensor) and \
                        out.dtype == torch.float32 else out
                return lowered

            def wrapped(*args, **kwargs):
                return fn(*[to(a) for a in args], **{k: to(v) for k, v in kwargs.items()})
            return wrapped
        def scalar(fn):
            def wrapped(self, other, *args, **kwargs):
                if isinstance(self, torch.Tensor) and self.dtype == torch.bfloat16 and \
                        isinstance(other, (int, float)) and not isinstance(other, bool):
                    return fn(self.float(), other, *args, **kwargs).to(torch.bfloat16)
                return fn(self, other, *args, **kwargs)
            return wrapped
        def opmath(fn):
            def wrapped(x, *args, **kwargs):
                if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16:
                    return fn(x.float(), *args, **kwargs).to(torch.bfloat16)
                return fn(x, *args, **kwargs)
            return wrapped
        for owner in (torch, F):
            for n in OPMATH:
                if hasattr(owner, n):
                    self.saved.append((owner, n, getattr(owner, n)))
                    setattr(owner, n, opmath(getattr(owner, n)))
        originals = {id(fn): (fn, getattr(owner, n)) for owner, n, fn in self.saved}
        for m in (self.model.modules() if self.model is not None else ()):
            for n, v in list(vars(m).items()):
                if callable(v) and id(v) in originals and originals[id(v)][0] is v:
                    self.saved.append((m, n, v))
                    setattr(m, n, originals[id(v)][1])
        for n in SCALAR_OPS:
            self.saved.append((torch.Tensor, n, getattr(torch.Tensor, n)))
            setattr(torch.Tensor, n, scalar(getattr(torch.Tensor, n)))
        for names, dtype in ((LOWER, torch.bfloat16), (FLOAT32, torch.float32)):
            for owner in (torch, F, torch.Tensor):
                for n in names:
                    if hasattr(owner, n):
                        self.saved.append((owner, n, getattr(owner, n)))
                        setattr(owner, n, cast(getattr(owner, n), dtype))
        return self

    def __exit__(self, *exc):
        for owner, n, fn in reversed(self.saved):
            setattr(owner, n, fn)
        return False
