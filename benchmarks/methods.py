"""The methods ``benchmarks.peers`` runs, behind one small interface (see that module's docstring): our kernels
(:class:`KernelMethod`) and the peer libraries, each wrapped the way its documentation advises for online
learning, with the same priors (:data:`ALPHA`, :data:`ETA`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evaluation import (
    compile_before_timing,
    fold_in,
)
from kernels import Batch

ALPHA = 0.1  # document–topic Dirichlet prior, the same for every LDA method
ETA = 0.01  # topic–word Dirichlet prior

REFERENCE = "tomotopy-gibbs"
FLOOR = "unigram"


def _bow(batch: Batch) -> list[list[tuple[int, float]]]:
    return [list(zip(*(a.tolist() for a in batch.doc(d)), strict=True)) for d in range(batch.n_docs)]


def _csr(batch: Batch, n_words: int) -> Any:
    from scipy.sparse import csr_matrix

    return csr_matrix((batch.counts, batch.word_ids, batch.indptr), shape=(batch.n_docs, n_words))


class Method:
    """The interface; ``K`` is the number of topics the method really has (the truncation for HDP)."""

    name = ""
    online = True
    K = 0

    def prepare(self, batches: list[Batch]) -> None:
        self.batches = batches

    def update(self, i: int) -> None:
        raise NotImplementedError

    def iterate(self, n: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of the single pass (timed, like an update): what a method held back (a kernel's ``flush``)."""

    def phi(self) -> NDArray[np.float64]:
        raise NotImplementedError

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        raise NotImplementedError

    def topic_weights(self) -> NDArray[np.float64] | None:
        return None

    def info(self) -> dict[str, Any]:
        return {}


class KernelMethod(Method):
    """A topicstream kernel from ``kernels.ALGORITHMS``."""

    def __init__(self, name: str, K: int, W: int, seed: int, params: dict[str, Any], warmup: Batch) -> None:
        from kernels import ALGORITHMS

        cls: Any = ALGORITHMS[name]
        self.name, self.K = name, K
        compile_before_timing(cls, params, K, W, seed, warmup)
        self.model = cls(n_topics=K, n_words=W, seed=seed, **params)

    def update(self, i: int) -> None:
        self.model.partial_fit(self.batches[i])

    def finish(self) -> None:
        self.model.flush()

    def phi(self) -> NDArray[np.float64]:
        return np.asarray(self.model.topic_word())

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        return np.asarray(self.model.transform(docs))

    def topic_weights(self) -> NDArray[np.float64] | None:
        return np.asarray(self.model.topic_weights())

    def info(self) -> dict[str, Any]:
        return {"params": self.model.get_params()}


class GensimLda(Method):
    """gensim ``LdaModel``: Hoffman et al.'s online VB, one process, one ``update`` (E + M step) per chunk."""

    name = "gensim-lda"

    def __init__(self, K: int, W: int, seed: int, n_train: int, batch_size: int) -> None:
        from gensim.models import LdaModel

        self.K, self.n_train = K, n_train
        self.model = LdaModel(
            num_topics=K,
            id2word={i: str(i) for i in range(W)},
            chunksize=batch_size,
            passes=1,
            update_every=1,
            alpha=np.full(K, ALPHA),
            eta=ETA,
            decay=0.5,
            offset=1.0,
            iterations=50,
            eval_every=None,  # no perplexity estimate after each update: diagnostics, not learning
            random_state=seed,
        )

    def prepare(self, batches: list[Batch]) -> None:
        self.bows = [_bow(b) for b in batches]

    def update(self, i: int) -> None:
        # gensim scales a chunk's statistics to ``state.numdocs``, which ``update`` first increases by the
        # chunk's length: given the whole corpus that is the corpus size D, fed chunk by chunk it would be the
        # documents seen so far. Give it D, like ``LdaModel(corpus)`` does (and like the other VB peers).
        self.model.state.numdocs = max(0, self.n_train - len(self.bows[i]))
        self.model.update(self.bows[i])

    def phi(self) -> NDArray[np.float64]:
        return np.asarray(self.model.get_topics(), dtype=np.float64)

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        gamma, _ = self.model.inference(_bow(docs))
        return np.asarray(gamma / gamma.sum(axis=1, keepdims=True))

    def info(self) -> dict[str, Any]:
        return {
            "params": {"alpha": ALPHA, "eta": ETA, "decay": 0.5, "offset": 1.0, "iterations": 50, "eval_every": None}
        }


class GensimHdp(Method):
    """gensim ``HdpModel`` (Wang, Paisley & Blei's online HDP), truncation T, one ``update_chunk`` per chunk.

    gensim's ``update`` would stop after ``len(corpus)`` documents; we call ``update_chunk`` ourselves with
    ``m_D`` = the number of training documents (what ``HdpModel(corpus)`` would set) and the same initial λ.
    """

    name = "gensim-hdp"

    def __init__(self, T: int, W: int, seed: int, n_train: int, batch_size: int) -> None:
        from gensim.models import HdpModel

        self.K = T
        m = HdpModel(corpus=None, id2word={i: str(i) for i in range(W)}, T=T, chunksize=batch_size, random_state=seed)
        m.m_D = n_train
        m.m_lambda = m.random_state.gamma(1.0, 1.0, (T, W)) * n_train * 100 / (T * W) - m.m_eta
        m.m_lambda_sum = np.sum(m.m_lambda, axis=1)
        from gensim.models.hdpmodel import dirichlet_expectation

        m.m_Elogbeta = dirichlet_expectation(m.m_eta + m.m_lambda)
        self.model = m
        self._stale = True

    def prepare(self, batches: list[Batch]) -> None:
        self.bows = [_bow(b) for b in batches]

    def update(self, i: int) -> None:
        self.model.update_chunk(self.bows[i])
        self.model.m_num_docs_processed += len(self.bows[i])
        self._stale = True

    def _sync(self) -> None:
        if self._stale:
            self.model.update_expectations()
            self.model.lda_alpha, self.model.lda_beta = self.model.hdp_to_lda()
            self._stale = False

    def phi(self) -> NDArray[np.float64]:
        self._sync()
        beta = np.asarray(self.model.lda_beta, dtype=np.float64)
        return beta / beta.sum(axis=1, keepdims=True)

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        self._sync()
        gamma = self.model.inference(_bow(docs))
        return np.asarray(gamma / gamma.sum(axis=1, keepdims=True))

    def info(self) -> dict[str, Any]:
        return {"params": {"T": self.K, "K": 15, "alpha": 1, "gamma": 1, "eta": 0.01, "kappa": 1.0, "tau": 64}}


class SklearnLda(Method):
    """scikit-learn ``LatentDirichletAllocation`` (online VB), ``partial_fit`` per minibatch.

    ``total_samples`` is the number of training documents (the library needs a corpus size).
    """

    name = "sklearn-lda"

    def __init__(self, K: int, W: int, seed: int, n_train: int, batch_size: int) -> None:
        from sklearn.decomposition import LatentDirichletAllocation

        self.K, self.W = K, W
        self.model = LatentDirichletAllocation(
            n_components=K,
            doc_topic_prior=ALPHA,
            topic_word_prior=ETA,
            learning_method="online",
            learning_decay=0.7,
            learning_offset=10.0,
            total_samples=n_train,
            batch_size=batch_size,
            random_state=seed,
            n_jobs=1,
        )

    def prepare(self, batches: list[Batch]) -> None:
        self.mats = [_csr(b, self.W) for b in batches]

    def update(self, i: int) -> None:
        self.model.partial_fit(self.mats[i])

    def phi(self) -> NDArray[np.float64]:
        c = np.asarray(self.model.components_, dtype=np.float64)
        return c / c.sum(axis=1, keepdims=True)

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        return np.asarray(self.model.transform(_csr(docs, self.W)), dtype=np.float64)

    def info(self) -> dict[str, Any]:
        return {"params": {"alpha": ALPHA, "eta": ETA, "learning_decay": 0.7, "learning_offset": 10.0}}


class VowpalWabbitLda(Method):
    """Vowpal Wabbit ``--lda`` (online VB in C++), fed text examples ``| id:count ...`` through pyvw.

    Word ``i`` is the numeric feature ``i``, which VW uses as its index; ``-b`` is large enough for no
    collisions. VW decays λ lazily (a word's row is brought up to date when the word is next seen, and all
    rows at the end of the input); :meth:`phi` applies the pending decay itself from VW's step-size schedule
    ``ρ_t = l·t^(−power_t)``, ``t`` from ``initial_t``, so the topics are read exactly as VW would save them.
    """

    name = "vw-lda"
    LR, POWER_T, INITIAL_T = 0.5, 0.5, 1.0

    def __init__(self, K: int, W: int, seed: int, n_train: int, batch_size: int) -> None:
        from vowpalwabbit import pyvw

        self.K, self.W, self.batch_size = K, W, batch_size
        bits = max(1, math.ceil(math.log2(W)))
        args = (
            f"--lda {K} --lda_D {n_train} --lda_alpha {ALPHA} --lda_rho {ETA} --minibatch {batch_size} "
            f"-l {self.LR} --power_t {self.POWER_T} --initial_t {self.INITIAL_T} -b {bits} "
            f"--random_seed {seed} --quiet"
        )
        self.args = args
        self.pyvw = pyvw
        self.vw = pyvw.Workspace(args)
        self.n_minibatches = 0
        self.pending = 0
        self._phi: NDArray[np.float64] | None = None

    def prepare(self, batches: list[Batch]) -> None:
        def line(ids: NDArray[np.int64], cnts: NDArray[np.float64]) -> str:
            return "| " + " ".join(f"{w}:{int(c)}" for w, c in zip(ids.tolist(), cnts.tolist(), strict=True))

        self.lines = [[line(*b.doc(d)) for d in range(b.n_docs)] for b in batches]

    def update(self, i: int) -> None:
        Example, simple = self.pyvw.Example, self.pyvw.LabelType.SIMPLE
        vw = self.vw
        for text in self.lines[i]:
            vw.learn(Example(vw, text, simple))
        # VW learns when its buffer holds --minibatch examples; our minibatches have exactly that many
        # documents except possibly the last one of a pass. Its examples would wait in the buffer, unlearned
        # (BBC: the last 80 documents, 4.6 % of the tokens, in a single pass), so empty examples fill it up and
        # VW learns them in this pass, its statistics scaled by D/B as a full buffer's (the other methods scale a
        # short minibatch by D/d; it is one minibatch of 18 to 178).
        self.pending += len(self.lines[i])
        if i == len(self.lines) - 1 and self.pending % self.batch_size:
            for _ in range(self.batch_size - self.pending % self.batch_size):
                vw.learn(Example(vw, "|", simple))
                self.pending += 1
        self.n_minibatches += self.pending // self.batch_size
        self.pending %= self.batch_size
        self._phi = None

    def phi(self) -> NDArray[np.float64]:
        if self._phi is None:
            self._phi = self._read_phi()
        return self._phi

    def _read_phi(self) -> NDArray[np.float64]:
        K, W = self.K, self.W
        get = self.vw.get_weight
        lam = np.array([[get(w, k) for k in range(K + 1)] for w in range(W)], dtype=np.float64)
        last = lam[:, K]
        # cumulative log(1-ρ_t) for t = initial_t .. initial_t + n_minibatches (index 0 = initial_t)
        ts = self.INITIAL_T + np.arange(1, self.n_minibatches + 1)
        levels = np.concatenate([[0.0], np.cumsum(np.log1p(-self.LR * ts ** (-self.POWER_T)))])
        idx = np.clip(np.rint(last - self.INITIAL_T).astype(np.int64), 0, levels.size - 1)
        decay = np.minimum(1.0, np.exp(levels[-1] - levels[idx]))
        phi = (lam[:, :K] * decay[:, None]).T + ETA
        phi = np.maximum(phi, 1e-300)
        return np.asarray(phi / phi.sum(axis=1, keepdims=True))

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        return fold_in(self.phi(), docs, alpha=ALPHA)

    def info(self) -> dict[str, Any]:
        return {"params": {"args": self.args}, "theta": "shared fold-in"}


class TomotopyGibbs(Method):
    """tomotopy ``LDAModel``: batch collapsed Gibbs sampling (the quality reference), one worker."""

    name = REFERENCE
    online = False

    def __init__(self, K: int, W: int, seed: int, vocab: list[str], optim_interval: int = 10) -> None:
        import tomotopy as tp

        self.tp = tp
        self.K, self.W, self.vocab = K, W, vocab
        self.model = tp.LDAModel(k=K, alpha=ALPHA, eta=ETA, seed=seed, min_cf=0, rm_top=0)
        self.model.optim_interval = optim_interval
        self.optim_interval = optim_interval
        self._phi: NDArray[np.float64] | None = None

    def _words(self, ids: NDArray[np.int64], cnts: NDArray[np.float64]) -> list[str]:
        return [self.vocab[w] for w, c in zip(ids.tolist(), cnts.tolist(), strict=True) for _ in range(int(c))]

    def prepare(self, batches: list[Batch]) -> None:
        for b in batches:
            for d in range(b.n_docs):
                self.model.add_doc(self._words(*b.doc(d)))

    def iterate(self, n: int) -> None:
        self.model.train(iterations=n, workers=1, parallel=self.tp.ParallelScheme.NONE)
        self._phi = None

    def phi(self) -> NDArray[np.float64]:
        if self._phi is None:
            index = {w: i for i, w in enumerate(self.vocab)}
            cols = np.array([index[w] for w in self.model.used_vocabs], dtype=np.int64)
            phi = np.full((self.K, self.W), 1e-12)
            for k in range(self.K):
                phi[k, cols] = self.model.get_topic_word_dist(k)
            self._phi = phi / phi.sum(axis=1, keepdims=True)
        return self._phi

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        made = [self.model.make_doc(self._words(*docs.doc(d))) for d in range(docs.n_docs)]
        inferred, _ = self.model.infer(made, iterations=100, workers=1, parallel=self.tp.ParallelScheme.NONE)
        theta = np.array([d if isinstance(d, np.ndarray) else d.get_topic_dist() for d in inferred], dtype=np.float64)
        return theta / theta.sum(axis=1, keepdims=True)

    def info(self) -> dict[str, Any]:
        return {"params": {"alpha": ALPHA, "eta": ETA, "optim_interval": self.optim_interval}}


class Unigram(Method):
    """The floor: one "topic", the training unigram distribution (counts + η)."""

    name = FLOOR

    def __init__(self, W: int) -> None:
        self.K, self.counts = 1, np.zeros(W)

    def update(self, i: int) -> None:
        b = self.batches[i]
        np.add.at(self.counts, b.word_ids, b.counts)

    def phi(self) -> NDArray[np.float64]:
        p = self.counts + ETA
        return (p / p.sum())[None, :]

    def infer(self, docs: Batch) -> NDArray[np.float64]:
        return np.ones((docs.n_docs, 1))
