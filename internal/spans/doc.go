// Package spans holds what the module's instrumented packages (the SDK, jobs,
// projections) share about their OpenTelemetry spans.
//
// Of this module it imports nothing; of OpenTelemetry, the API only, never an
// exporter.
package spans
