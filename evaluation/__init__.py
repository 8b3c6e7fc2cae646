"""The evaluation library behind ``topicstream eval`` and ``benchmarks/``: train a kernel on a corpus in one pass
and score it on held-out documents.

Everything here is measured the same way for our kernels and for the peer libraries in ``benchmarks/``, which
import the data preparation and the scorers from this package (:mod:`evaluation.corpus`,
:mod:`evaluation.scores`; the command is :mod:`evaluation.command`).

Data
    ``load_articles`` reads JSON Lines, gzip-compressed or not (``id``, ``title``, ``text``, ``label``...).
    The text of an article is its title, a blank line, and its body, tokenised by the service's
    :class:`~service.text.Tokenizer` (so every method sees the same tokens). Training documents are
    shuffled (seeded) unless ``shuffle=False``: the 20 Newsgroups and BBC files are sorted by label, which
    would turn one pass into a sequence of unrelated corpora.

Vocabulary (fixed, so that every method sees the same word ids)
    The words of the *training* documents with document frequency ≥ 2, the ``vocab_size`` most frequent by
    token count (ties by the word itself), numbered in that order. Test words outside it are dropped.

Held-out log-likelihood per word (document completion; docs/benchmarks.md states it for every method)
    Each test document's in-vocabulary tokens are shuffled (NumPy PCG64 seeded with ``seed``, documents in
    file order) and split: the first ⌊n/2⌋ tokens are *observed*, the other ⌈n/2⌉ are *held out*. Documents
    with fewer than 2 tokens are skipped. θ_d is inferred from the observed half with the topics fixed
    (``model.transform``); the score is the mean over held-out tokens of ``log Σ_k θ_dk φ_kw`` (nats/word).

NMI
    scikit-learn's ``normalized_mutual_info_score`` (arithmetic mean normalisation) between the label and
    the dominant topic ``argmax θ`` inferred from the *whole* test document. Documents without a label are
    skipped; for multi-label corpora (Reuters: ``"grain;wheat"``) the first label is used. ``None`` unless the
    labelled test documents hold two different labels (with one, NMI is 1 or 0 whatever the model does).
    ``nmi_without_background`` takes the dominant topic among the others when the model marks a background topic
    (``background_topic``), as the outputs name it (``topicstream-topic``): a background that most documents lean
    on would otherwise be every document's "dominant topic", and NMI would score the background, not the topics.

NPMI coherence
    For each topic, its 10 most probable words; for every pair, NPMI = log(p_ij / (p_i p_j)) / −log p_ij with
    p = document frequencies over the *test* documents (a word "occurs" in a document when its count is > 0).
    No additive smoothing: a pair that never co-occurs gets the limit value −1, a pair that occurs in every
    document gets 1. A topic's coherence is the mean over its 45 pairs, the model's the mean over its used
    topics, so the value always lies in [−1, 1]; ``None`` when no test document holds an in-vocabulary word.
    ``npmi_coherence`` averages over ``topics_used``, ``npmi_coherence_heldout`` over ``topics_used_heldout``
    (the benchmarks' NPMI).

Topics used
    ``topics_used``: topics whose prevalence in the model (``model.topic_weights()``) is ≥ 1 %;
    ``top_words`` lists their 10 top words, most prevalent first. ``topics_used_heldout`` counts topics whose
    mean θ over the test documents is ≥ 1 % — the definition the benchmarks use for every library.

Speed and memory
    ``train_seconds`` is the wall time spent inside ``partial_fit`` only (tokenising is
    ``tokenize_seconds``; numba's compilation, or loading it from the cache, happens on a throw-away model before
    the clock starts, as in the benchmarks; ``flush`` at the end of the pass, e.g. the particle filter's initial
    sample on a corpus shorter than it, is inside it); ``tokens_per_second`` = training tokens / ``train_seconds``;
    ``peak_rss_mb`` is the process's peak resident set size (``VmHWM`` on Linux, else ``getrusage``), data
    loading included.

JSON
    ``--json`` writes one strict JSON object: a score without a value (no test document with two in-vocabulary
    tokens, no used topic) is ``null``, never ``NaN``.
"""

from .command import compile_before_timing, eval_command, evaluate
from .corpus import (
    PreparedCorpus,
    article_text,
    build_vocabulary,
    document_completion,
    encode,
    iter_batches,
    load_articles,
    prepare_corpus,
    primary_label,
    split_articles,
)
from .scores import (
    N_TOP_WORDS,
    USED_THRESHOLD,
    fold_in,
    heldout_loglik_per_word,
    nmi,
    npmi_coherence,
    npmi_per_topic,
    peak_rss_mb,
    score_model,
    top_word_ids,
)

__all__ = [
    "N_TOP_WORDS",
    "USED_THRESHOLD",
    "PreparedCorpus",
    "article_text",
    "build_vocabulary",
    "compile_before_timing",
    "document_completion",
    "encode",
    "eval_command",
    "evaluate",
    "fold_in",
    "heldout_loglik_per_word",
    "iter_batches",
    "load_articles",
    "nmi",
    "npmi_coherence",
    "npmi_per_topic",
    "peak_rss_mb",
    "prepare_corpus",
    "primary_label",
    "score_model",
    "split_articles",
    "top_word_ids",
]
