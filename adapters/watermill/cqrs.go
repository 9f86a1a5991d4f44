package twicewatermill

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/runtwice/twice/harness"
)

// EventJob is a cqrs.EventHandler for harness.Check, harness.Explore and
// the runner, checked as Watermill's cqrs.EventProcessor runs it: the
// producer publishes event through config.Marshaler (as cqrs.EventBus
// does), and each worker process builds an EventProcessor from config on
// its router and adds the handler newHandler builds, once per process,
// from the process's connections (Worker.DB), as production builds its
// handlers at startup. The processor does what it does in production:
// the event name check (AckOnUnknownEvent), cqrs.CtxWithOriginalMessage,
// the unmarshal, OnHandle.
//
// config is the production processor config; only SubscriberConstructor
// is replaced (the worker's subscriber is the harness's), and a missing
// GenerateSubscribeTopic gets one that names the event.
func EventJob(name string, event any, config cqrs.EventProcessorConfig, newHandler func(w *Worker) cqrs.EventHandler, opts ...Option) harness.Job {
	j := &jobSpec{name: name, perProcess: true}
	j.register = func(p *process, r *message.Router) error {
		h := newHandler(p.worker)
		if h == nil {
			return errors.New("newHandler returned a nil cqrs.EventHandler")
		}
		c := config
		c.SubscriberConstructor = func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) { return p.in, nil }
		if c.GenerateSubscribeTopic == nil {
			c.GenerateSubscribeTopic = func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) { return p.EventName, nil }
		}
		processor, err := cqrs.NewEventProcessorWithConfig(r, c)
		if err != nil {
			return err
		}
		return processor.AddHandlers(eventHandler{h})
	}
	return j.harnessJob(marshaled(name, event, config.Marshaler), opts)
}

// CommandJob is a cqrs.CommandHandler for harness.Check, harness.Explore
// and the runner, checked as Watermill's cqrs.CommandProcessor runs it,
// with the production processor config: see EventJob.
func CommandJob(name string, command any, config cqrs.CommandProcessorConfig, newHandler func(w *Worker) cqrs.CommandHandler, opts ...Option) harness.Job {
	j := &jobSpec{name: name, perProcess: true}
	j.register = func(p *process, r *message.Router) error {
		h := newHandler(p.worker)
		if h == nil {
			return errors.New("newHandler returned a nil cqrs.CommandHandler")
		}
		c := config
		c.SubscriberConstructor = func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) { return p.in, nil }
		if c.GenerateSubscribeTopic == nil {
			c.GenerateSubscribeTopic = func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return p.CommandName, nil }
		}
		processor, err := cqrs.NewCommandProcessorWithConfig(r, c)
		if err != nil {
			return err
		}
		return processor.AddHandlers(commandHandler{h})
	}
	return j.harnessJob(marshaled(name, command, config.Marshaler), opts)
}

// marshaled publishes v as the cqrs buses do, under the job's UUIDs.
func marshaled(name string, v any, m cqrs.CommandEventMarshaler) func(n int, _ time.Time) (*message.Message, error) {
	return func(n int, _ time.Time) (*message.Message, error) {
		if m == nil {
			return nil, errors.New("the processor config has no Marshaler")
		}
		msg, err := m.Marshal(v)
		if err != nil {
			return nil, err
		}
		msg.UUID = MessageUUID(name, strconv.Itoa(n))
		return msg, nil
	}
}

// eventHandler is the user's handler as the innermost link: it records
// what the handler did with the delivery's message.
type eventHandler struct{ h cqrs.EventHandler }

func (e eventHandler) HandlerName() string { return e.h.HandlerName() }
func (e eventHandler) NewEvent() any       { return e.h.NewEvent() }
func (e eventHandler) Handle(ctx context.Context, event any) error {
	return handleRecorded(ctx, func() error { return e.h.Handle(ctx, event) })
}

type commandHandler struct{ h cqrs.CommandHandler }

func (c commandHandler) HandlerName() string { return c.h.HandlerName() }
func (c commandHandler) NewCommand() any     { return c.h.NewCommand() }
func (c commandHandler) Handle(ctx context.Context, cmd any) error {
	return handleRecorded(ctx, func() error { return c.h.Handle(ctx, cmd) })
}

func handleRecorded(ctx context.Context, handle func() error) error {
	t := tryOf(ctx)
	if t == nil {
		return errForeignContext
	}
	_, err := runHandler(t, func() ([]*message.Message, error) { return nil, handle() })
	return err
}
