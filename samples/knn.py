"""Nearest neighbour (L2) of a query among 5000 feature vectors of dimension 1000."""

import numpy as np
import tensorflow as tf
import workload

N, DIM, CLUSTERS = 5000, 1000, 50


@tf.function(
    input_signature=[
        tf.TensorSpec([N, DIM], tf.float32, name="features"),
        tf.TensorSpec([DIM], tf.float32, name="query"),
    ]
)
def program(features, query):
    distances = tf.reduce_sum(tf.square(features - query), axis=1)
    index = tf.argmin(distances)
    return {"index": index, "distance": tf.gather(distances, index)}


def inputs(seed: int = 0) -> dict:
    """Clustered features (50 centres, unit noise) and a query near one of them, fixed seed."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 10, (CLUSTERS, DIM)).astype(np.float32)
    labels = rng.integers(0, CLUSTERS, N)
    features = centres[labels] + rng.normal(0, 1, (N, DIM)).astype(np.float32)
    query = centres[labels[123]] + rng.normal(0, 1, DIM).astype(np.float32)
    return {"features": features, "query": query.astype(np.float32)}


def peer(features, query):
    diff = features - query
    distances = np.einsum("ij,ij->i", diff, diff)
    index = np.argmin(distances)
    return {"index": np.int64(index), "distance": distances[index]}


def check(got, want):
    assert int(got["index"]) == int(want["index"]), (got["index"], want["index"])
    np.testing.assert_allclose(got["distance"], want["distance"], rtol=1e-5)


def bytes_moved(inp) -> int:
    return inp["features"].nbytes + inp["query"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
