from camelcase import camel_to_underscore


def test_camel_case():
    assert camel_to_underscore("someThing") == "some_thing"
    assert camel_to_underscore("HTTPResponse") == "http_response"


def test_numbers():
    assert camel_to_underscore("anotherKey1") == "another_key_1"


def test_all_caps():
    assert camel_to_underscore("TEST") == "test"


def test_trailing_acronym():
    assert camel_to_underscore("getHTTP") == "get_http"
    assert camel_to_underscore("isAPI") == "is_api"
