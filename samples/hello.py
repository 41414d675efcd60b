"""GDPNPU's listing (thesis figure 5-1), with the one change Keras 3 forces.

Keras 3 refuses raw TF ops on symbolic inputs, so there `c` is a named Keras layer; with
TF_USE_LEGACY_KERAS=1 (and tf-keras installed) the listing's own `tf.add(a, b, name="c")` runs.
"""

import numpy as np
import tensorflow as tf

import gdp

a = tf.keras.Input(shape=(2, 3), batch_size=1, name="a", dtype=tf.float32)
b = tf.keras.Input(shape=(2, 3), batch_size=1, name="b", dtype=tf.float32)
if tf.keras.__name__.startswith("tf_keras"):  # legacy tf.keras
    c = tf.add(a, b, name="c")
else:  # Keras 3
    c = tf.keras.layers.Add(name="c")([a, b])

x = np.ones((2, 3), np.float32)
y = np.ones((2, 3), np.float32)
z = np.zeros((2, 3), np.float32)
model = gdp.compile([a, b], [c])
handle = gdp.run_async(model, {"a": x, "b": y}, {"c": z}, profile=True)
gdp.sync()
print(z)
print(handle.profile)
