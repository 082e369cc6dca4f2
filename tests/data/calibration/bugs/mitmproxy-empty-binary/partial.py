"""Is a body text or binary? (re-created from mitmproxy's string utilities at issue #1501)."""


def is_binary_char(byte):
    return byte < 9 or 13 < byte < 32 or 126 < byte


def binary_ratio(data):
    sample = data[:100]
    return sum(is_binary_char(b) for b in sample) / len(sample)


def is_mostly_bin(data):
    if not data:
        return False
    return binary_ratio(data) > 0.3
