"""The example's checks: `python3 -m unittest` (the loop's done_when) runs them."""

import unittest

from calc import add, mean


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_mean(self) -> None:
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_mean_of_nothing(self) -> None:
        self.assertEqual(mean([]), 0.0)


if __name__ == "__main__":
    unittest.main()
