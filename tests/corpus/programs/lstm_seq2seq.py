"""keras.io `nlp/lstm_seq2seq`: an LSTM encoder whose states start an LSTM decoder,
one-hot character sequences, a model on a LIST of two inputs, `categorical_crossentropy`
on one-hot targets, `optimizer="rmsprop"`, `validation_split=0.2`."""

import keras
import numpy as np

ENC_TOKENS, DEC_TOKENS, LATENT_DIM = 12, 14, 8
FIT_KWARGS = {"epochs": 2, "batch_size": 16, "validation_split": 0.2, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    n = 120
    enc = keras.utils.to_categorical(rng.integers(0, ENC_TOKENS, size=(n, 7)), ENC_TOKENS)
    dec_ids = rng.integers(0, DEC_TOKENS, size=(n, 9))
    dec_in = keras.utils.to_categorical(dec_ids, DEC_TOKENS)
    target = np.zeros_like(dec_in)
    target[:, :-1] = dec_in[:, 1:]
    return {"x": [enc, dec_in], "y": target}


def make_model():
    keras.utils.set_random_seed(1)
    encoder_inputs = keras.Input(shape=(None, ENC_TOKENS))
    encoder = keras.layers.LSTM(LATENT_DIM, return_state=True)
    _, state_h, state_c = encoder(encoder_inputs)
    encoder_states = [state_h, state_c]
    decoder_inputs = keras.Input(shape=(None, DEC_TOKENS))
    decoder_lstm = keras.layers.LSTM(LATENT_DIM, return_sequences=True, return_state=True)
    decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
    decoder_dense = keras.layers.Dense(DEC_TOKENS, activation="softmax")
    decoder_outputs = decoder_dense(decoder_outputs)
    model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)
    model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
    return model
