// Package amqpinbox connects the inbound AMQP bridge to an inbox: each
// batch of deliveries the bridge takes in becomes one inbox batch (a row
// and the River job that runs it) in the bridge's inserting transaction,
// and the bridge acks the deliveries only after that commit
// (ExampleInserter). Statements sends that transaction (BEGIN, the rows,
// COMMIT) and the wake of River's producers in one round trip to Postgres;
// Inserter writes in a pgx.Tx, for an insert that writes more in the same
// transaction.
//
// A delivery becomes a message: ID the message id, Type, CorrelationID and
// ContentType its properties, Source the broker name of the queue it came
// from, RoutingKey, Timestamp (zero without one), Body as it is (any bytes;
// it is not parsed), and Headers, converted to JSON values:
//
//	string                   a string (it must be UTF-8 without a NUL byte)
//	bool, nil                true or false, null
//	int8 ... int64, uint8 ... uint32
//	                         an integer: int64 in Message.Headers
//	float32, float64         a number (float64, or int64 when integral);
//	                         NaN, +Inf, -Inf as the strings "NaN", "+Inf", "-Inf"
//	amqp.Decimal             the exact decimal number (12345 scale 2 is 123.45)
//	time.Time (timestamp)    an RFC 3339 string in UTC
//	[]byte (byte array)      a base64 string (standard encoding, padded)
//	amqp.Table               an object, converted the same way
//	[]any (field array)      an array, converted the same way
//
// A delivery that cannot become a message (a text property or header that
// is not UTF-8 or holds a NUL byte, which PostgreSQL cannot store) is a
// permanent failure: it goes to "{name}.failed" with the reason, and the
// rest of its batch is inserted without it.
//
// It lives apart from package inbox so that inbox does not depend on the
// AMQP bridge.
package amqpinbox
