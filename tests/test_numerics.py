"""A broad numerical check: the same programs on myplugin and on jax's CPU
backend, in one process."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import assert_same, compare, run_on

RNG = np.random.default_rng(1234)


def test_backends_are_distinct():
  assert jax.default_backend() == "myplugin"
  assert len(jax.devices("myplugin")) == 8 and len(jax.devices("cpu")) == 8
  assert all(d.platform == "myplugin" for d in jax.devices())


def test_grad_and_value_and_grad():
  def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)

  w = RNG.normal(size=(16, 8)).astype(np.float32)
  x = RNG.normal(size=(32, 16)).astype(np.float32)
  # atol 1e-5: on jax 0.12 the reference is jaxlib 0.12's XLA and ours the
  # engine's 0.11.2, whose tanh differs by ulps; sums of 32 such terms that
  # nearly cancel then differ by up to 4.8e-6 (docs/compatibility.md, "Tolerances").
  compare(jax.grad(loss), w, x, rtol=1e-5, atol=1e-5)
  compare(jax.value_and_grad(loss, argnums=(0, 1)), w, x, rtol=1e-5, atol=1e-5)
  compare(jax.hessian(lambda v: jnp.sum(jnp.sin(v) * v ** 3)), x[0], rtol=1e-5)


def test_vmap():
  def f(a, b):
    return jnp.dot(a, b) + jnp.max(a)

  a = RNG.normal(size=(10, 5)).astype(np.float32)
  b = RNG.normal(size=(10, 5)).astype(np.float32)
  compare(jax.vmap(f), a, b, rtol=1e-5)
  compare(jax.vmap(jax.vmap(lambda u: u * 2 + 1)), a)


def test_scan_and_while_loop_and_fori():
  def cumulative(xs):
    def step(carry, x):
      carry = carry * 0.9 + x
      return carry, carry
    return jax.lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)

  xs = RNG.normal(size=(50, 4)).astype(np.float32)
  compare(cumulative, xs, rtol=1e-5)

  def collatz_steps(n):
    def cond(state):
      return state[0] != 1
    def body(state):
      n, k = state
      return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
    return jax.lax.while_loop(cond, body, (n, jnp.int32(0)))[1]

  out = compare(collatz_steps, np.int32(27))
  assert int(out) == 111  # a known value
  compare(lambda x: jax.lax.fori_loop(0, 10, lambda i, v: v + i * x, x), np.float32(1.5))


def test_random():
  def sample(seed):
    key = jax.random.key(seed)
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.normal(k1, (100,)), jax.random.uniform(k2, (7, 3)),
            jax.random.randint(k3, (20,), 0, 1000), jax.random.permutation(k3, 16),
            jax.random.bernoulli(k2, 0.3, (12,)))

  compare(sample, np.uint32(42))
  # threefry is exact integer arithmetic: bits must match exactly.
  assert_same(run_on("myplugin", lambda: jax.random.bits(jax.random.key(7), (64,))),
              run_on("cpu", lambda: jax.random.bits(jax.random.key(7), (64,))))


def test_fft():
  x = RNG.normal(size=(64,)).astype(np.float32)
  compare(jnp.fft.fft, x, rtol=1e-5, atol=1e-5)
  compare(jnp.fft.rfft, x, rtol=1e-5, atol=1e-5)
  compare(lambda v: jnp.fft.ifft(jnp.fft.fft(v)).real, x, rtol=1e-5, atol=1e-5)
  compare(jnp.fft.fft2, RNG.normal(size=(8, 16)).astype(np.float32), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(run_on("myplugin", jnp.fft.fft, x), np.fft.fft(x), rtol=1e-4, atol=1e-4)


def test_sort_argsort_topk():
  x = RNG.normal(size=(100,)).astype(np.float32)
  out = compare(jnp.sort, x)
  np.testing.assert_array_equal(out, np.sort(x))
  compare(jnp.argsort, x)
  compare(lambda v: jax.lax.top_k(v, 5), x)
  compare(lambda v: jnp.sort(v.reshape(10, 10), axis=0), x)


def test_reductions():
  x = RNG.normal(size=(6, 7, 8)).astype(np.float32)
  for fn in (jnp.sum, jnp.mean, jnp.max, jnp.min, jnp.prod, jnp.std, jnp.var, jnp.argmax, jnp.argmin,
             lambda v: jnp.sum(v, axis=(0, 2)), lambda v: jnp.cumsum(v, axis=1), jax.nn.logsumexp,
             lambda v: jnp.any(v > 1.5), lambda v: jnp.all(v > -5)):
    compare(fn, x, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(run_on("myplugin", jnp.sum, x), np.sum(x), rtol=1e-5)


ELEMENTWISE_DTYPES = ["float32", "bfloat16", "float16", "int8", "int32", "uint8", "bool"]


def _sample(dtype, shape=(5, 6)):
  if dtype == "bool":
    return RNG.integers(0, 2, size=shape).astype(bool)
  if np.issubdtype(np.dtype(dtype), np.integer):
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -50), min(info.max, 50), size=shape).astype(dtype)
  return RNG.normal(size=shape).astype(jnp.dtype(dtype))


def _ops_for(dtype):
  if dtype == "bool":
    return lambda a, b: (a & b, a | b, a ^ b, ~a, jnp.sum(a))
  if np.issubdtype(jnp.dtype(dtype), np.integer):
    return lambda a, b: (a + b, a * b, jnp.maximum(a, b), a // jnp.where(b == 0, 1, b), jnp.sum(a),
                         a.T @ b, jnp.cumsum(a, axis=0), a > b)
  return lambda a, b: (a + b, a * b, jnp.exp(a), jnp.tanh(b), jnp.sum(a), a.T @ b, a > b,
                       jnp.sqrt(jnp.abs(a)), jnp.sort(a, axis=1))


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
def test_dtypes(dtype):
  tol = {"bfloat16": 2e-2, "float16": 2e-3}.get(dtype, 1e-5)
  a, b = _sample(dtype), _sample(dtype)
  out = compare(_ops_for(dtype), a, b, rtol=tol, atol=tol)
  # The sum against numpy, as an independent reference.
  np.testing.assert_allclose(np.asarray(out[4], np.float64), np.sum(a.astype(np.float64)), rtol=max(tol, 1e-5) * 5)


@pytest.fixture
def x64():
  jax.config.update("jax_enable_x64", True)
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_dtypes_x64(x64, dtype):
  a, b = _sample(dtype), _sample(dtype)
  out = compare(_ops_for(dtype), a, b, rtol=1e-12, atol=1e-12)
  assert out[0].dtype == np.dtype(dtype)
  np.testing.assert_allclose(out[4], np.sum(a), rtol=1e-12)
  if dtype == "float64":
    # f64 really is f64: 1 + 1e-12 survives.
    assert float(run_on("myplugin", lambda v: v + 1e-12, np.float64(1.0))) != 1.0


def test_linalg_lapack():
  """jnp.linalg decompositions lower to LAPACK custom calls, registered into the engine."""
  m = RNG.normal(size=(6, 6)).astype(np.float32)
  spd = m @ m.T + 6 * np.eye(6, dtype=np.float32)
  compare(jnp.linalg.cholesky, spd, rtol=1e-4, atol=1e-4)
  compare(jnp.linalg.inv, spd, rtol=1e-4, atol=1e-4)
  compare(jnp.linalg.solve, spd, m[:, 0], rtol=1e-4, atol=1e-4)
  compare(jnp.linalg.det, m, rtol=1e-4, atol=1e-4)
  compare(lambda a: jnp.linalg.svd(a, compute_uv=False), m, rtol=1e-4, atol=1e-4)
  compare(lambda a: jnp.linalg.eigh(a)[0], spd, rtol=1e-4, atol=1e-4)
  q, r = run_on("myplugin", jnp.linalg.qr, m)
  np.testing.assert_allclose(q @ r, m, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(run_on("myplugin", jnp.linalg.cholesky, spd), np.linalg.cholesky(spd), rtol=1e-4,
                             atol=1e-4)


def _mlp_losses(platform, steps=25):
  device = jax.devices(platform)[0]
  rng = np.random.default_rng(0)
  x = rng.normal(size=(128, 16)).astype(np.float32)
  y = (x @ rng.normal(size=(16, 1)) > 0).astype(np.float32)
  params = {
      "w1": rng.normal(size=(16, 32)).astype(np.float32) * 0.3, "b1": np.zeros(32, np.float32),
      "w2": rng.normal(size=(32, 1)).astype(np.float32) * 0.3, "b2": np.zeros(1, np.float32),
  }
  params, x, y = jax.device_put((params, x, y), device)

  def loss_fn(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)

  @jax.jit
  def step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), loss

  losses = []
  for _ in range(steps):
    params, loss = step(params, x, y)
    losses.append(float(loss))
  return np.array(losses)


def test_mlp_training_losses_match():
  ours, ref = _mlp_losses("myplugin"), _mlp_losses("cpu")
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
  assert ours[-1] < ours[0] * 0.8  # it actually trains
