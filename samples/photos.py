"""Real photos for the samples: scikit-image's bundled RGB pictures, resized to 1080p."""

import cv2
import numpy as np
import skimage.data

NAMES = [
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "retina",
    "colorwheel",
]


def photo_1080p(name: str = "astronaut") -> np.ndarray:
    """uint8 RGB, 1080x1920x3."""
    return cv2.resize(getattr(skimage.data, name)(), (1920, 1080), interpolation=cv2.INTER_CUBIC)


def batch_1080p(n: int = 8) -> np.ndarray:
    """uint8 (n, 1080, 1920, 3) of n different photos (repeating the list past its end)."""
    return np.stack([photo_1080p(NAMES[i % len(NAMES)]) for i in range(n)])
