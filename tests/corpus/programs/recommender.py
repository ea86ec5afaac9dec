"""keras.io `structured_data/collaborative_filtering_movielens`: a subclassed
RecommenderNet (user and movie embedding tables and biases, regularized), unbuilt until
its first batch, on (user, movie) index pairs; ratings normalized to floats in [0, 1]
with `BinaryCrossentropy`; `validation_data`."""

import keras
import numpy as np
from keras import layers, ops

NUM_USERS, NUM_MOVIES, EMBEDDING_SIZE = 40, 60, 8
FIT_KWARGS = {"epochs": 2, "batch_size": 64, "shuffle": False}
COMPARE = "weights"


class RecommenderNet(keras.Model):
    def __init__(self, num_users, num_movies, embedding_size, **kwargs):
        super().__init__(**kwargs)
        self.user_embedding = layers.Embedding(
            num_users,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.user_bias = layers.Embedding(num_users, 1)
        self.movie_embedding = layers.Embedding(
            num_movies,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.movie_bias = layers.Embedding(num_movies, 1)

    def call(self, inputs):
        user_vector = self.user_embedding(inputs[:, 0])
        user_bias = self.user_bias(inputs[:, 0])
        movie_vector = self.movie_embedding(inputs[:, 1])
        movie_bias = self.movie_bias(inputs[:, 1])
        dot_user_movie = ops.sum(user_vector * movie_vector, axis=1, keepdims=True)
        x = dot_user_movie + user_bias + movie_bias
        return ops.nn.sigmoid(x)


def _ratings(n, seed):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, NUM_USERS, size=n)
    movies = rng.integers(0, NUM_MOVIES, size=n)
    rating = ((users % 5) + (movies % 3) + 0.5 + rng.integers(0, 2, size=n)) / 8.0
    return np.stack([users, movies], axis=1).astype("int64"), rating.astype("float32")


def make_data(seed):
    x, y = _ratings(448, seed)
    return {"x": x, "y": y, "validation_data": _ratings(64, seed + 10)}


def make_model():
    keras.utils.set_random_seed(1)
    model = RecommenderNet(NUM_USERS, NUM_MOVIES, EMBEDDING_SIZE)
    model.compile(
        loss=keras.losses.BinaryCrossentropy(),
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
    )
    return model
