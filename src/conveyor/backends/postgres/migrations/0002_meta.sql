-- Small shared records that are not jobs: live workers (with a TTL), schedule state.
CREATE TABLE meta (
    namespace  text NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,  -- JSON text
    expires_at double precision,  -- epoch seconds from the application clock; NULL: forever
    PRIMARY KEY (namespace, key)
);
